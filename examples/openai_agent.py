"""An agent on the official openai SDK playing one ALFWorld task through the SkillOS gateway: the only
SkillOS-specific lines are the base URL, the trajectory header and the outcome report at the end.

    python examples/openai_agent.py [--index N] [--turns T]
    # SKILLOS_GATEWAY_URL (http://127.0.0.1:8002/v1), SKILLOS_ALFWORLD_URL (http://127.0.0.1:8010), SKILLOS_MODEL,
    # SKILLOS_API_TOKEN (a token of SKILLOS_AUTH_TOKENS where the stack has tokens on, as compose and Helm do),
    # SKILLOS_REPO (the skill repo to learn into; default: the gateway's)
"""

import argparse
import difflib
import json
import os

import httpx
from openai import OpenAI

GATEWAY = os.environ.get("SKILLOS_GATEWAY_URL", "http://127.0.0.1:8002/v1")
ENV = os.environ.get("SKILLOS_ALFWORLD_URL", "http://127.0.0.1:8010")
MODEL = os.environ.get("SKILLOS_MODEL", "qwen2.5-coder-1.5b-instruct")
TOKEN = os.environ.get("SKILLOS_API_TOKEN") or "none"  # the gateway's bearer token: the SDK's api_key
REPO = {"X-SkillOS-Repo": os.environ["SKILLOS_REPO"]} if os.environ.get("SKILLOS_REPO") else {}
LOOKS = ("look", "inventory", "examine", "close", "help")


def play(index: int = 0, turns: int = 10) -> dict:
    env = httpx.Client(base_url=ENV, timeout=300, headers={"Authorization": f"Bearer {TOKEN}"})  # env servers too
    llm = OpenAI(base_url=GATEWAY, api_key=TOKEN)
    game = env.post("/v1/sessions", json={"split": "valid_seen", "index": index}).json()
    obs, actions, won, tried = game["observation"], game["admissible_actions"], False, set()
    messages = [{"role": "system", "content": "You are a household robot. Think in one sentence, then pick an action."}]
    headers = {"X-SkillOS-Task": game["task"]["instruction"], **REPO}  # what the gateway finds skills for
    for _ in range(turns):
        # the agent's own rule: no looking around, nothing it already tried where it stands
        offered = [a for a in actions if not a.startswith(LOOKS) and (obs, a) not in tried] or actions
        messages.append({"role": "user", "content": f"{obs}\nActions: {', '.join(offered)}"})
        schema = {"type": "object", "required": ["thought", "action"], "properties": {
            "thought": {"type": "string", "maxLength": 120}, "action": {"enum": offered}}}
        raw = llm.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, max_tokens=80, temperature=0.3, extra_headers=headers,
            response_format={"type": "json_schema", "json_schema": {"name": "step", "schema": schema}})
        headers = {"X-SkillOS-Trajectory": raw.headers["X-SkillOS-Trajectory"]}  # later calls: same trajectory
        said = raw.parse().choices[0].message.content or ""
        try:   # a reply cut at max_tokens is no JSON: the closest offered action then
            action = json.loads(said).get("action")
        except (ValueError, AttributeError):
            action = None
        action = action if action in actions else (difflib.get_close_matches(said, offered, n=1, cutoff=0) or offered)[0]
        messages.append({"role": "assistant", "content": said})
        tried.add((obs, action))
        step = env.post(f"/v1/sessions/{game['session_id']}/step", json={"action": action}).json()
        obs, actions, won = step["observation"], step["admissible_actions"], step["won"]
        if step["done"]:
            break
    env.delete(f"/v1/sessions/{game['session_id']}")
    trajectory = headers["X-SkillOS-Trajectory"]
    httpx.post(f"{GATEWAY}/trajectories/{trajectory}/outcome", headers={"Authorization": f"Bearer {TOKEN}"},
               timeout=30, json={"success": won, "feedback": "won the game" if won else f"not won in {turns} turns"}).raise_for_status()
    return {"trajectory": trajectory, "won": won, "task": game["task"]["instruction"]}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--turns", type=int, default=10)
    print(play(**vars(ap.parse_args())))
