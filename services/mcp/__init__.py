"""The MCP server (`skillos serve mcp`): the skill repo as MCP tools and resources for agents that speak MCP."""
