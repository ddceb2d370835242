"""An MCP client session on the official SDK's own client: it starts `skillos serve mcp` over stdio (or joins
a running one over streamable HTTP), lists the tools, lists the repo's skills, reads one and searches.

    python examples/mcp_client.py                          # the skill repo at $SKILLOS_SKILLREPO_URL
    python examples/mcp_client.py --query "heat a mug and put it in the cabinet"
    python examples/mcp_client.py --http http://127.0.0.1:8005/mcp --token "$SKILLOS_API_TOKEN"

The stdio server gets this process's SKILLOS_* variables (the skill repo's URL, the token to send).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


def server(args: argparse.Namespace):
    if args.http:  # a running `skillos serve mcp --transport http`, with our token
        headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
        return streamable_http_client(args.http, http_client=httpx2.AsyncClient(headers=headers, timeout=30))
    env = {k: v for k, v in os.environ.items() if k.startswith("SKILLOS_") or k == "PYTHONPATH"}
    return StdioServerParameters(command=sys.executable, env=env,
                                 args=["-m", "skillos.cli", "serve", "mcp", "--transport", "stdio"])


async def main(args: argparse.Namespace) -> None:
    async with Client(server(args)) as client:
        tools = await client.list_tools()
        print("tools:", ", ".join(t.name for t in tools.tools))
        listed = await client.list_resources()
        print(f"skills ({len(listed.resources)}):")
        for r in listed.resources:
            print(f"  {r.uri}  {r.description}")
        if listed.resources:
            first = await client.read_resource(str(listed.resources[0].uri))
            print(f"--- {listed.resources[0].uri}\n{first.contents[0].text}\n---")
        found = await client.call_tool("search_skills", {"query": args.query, "k": 3, "repo": args.repo})
        if found.is_error:
            sys.exit(f"search_skills failed: {found.content[0].text}")
        print(f"search {args.query!r}:")
        for hit in found.structured_content["skills"]:
            print(f"  {hit['score']:.3f}  {hit['name']}: {hit['description']}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", default=None, help="the skill repo (default: the server's, SKILLOS_MCP_DEFAULT_REPO)")
    p.add_argument("--query", default="heat an object with the microwave", help="a task to search skills for")
    p.add_argument("--http", default=None, help="URL of a streamable HTTP MCP server instead of stdio")
    p.add_argument("--token", default=os.environ.get("SKILLOS_API_TOKEN"), help="bearer token (--http)")
    asyncio.run(main(p.parse_args()))
