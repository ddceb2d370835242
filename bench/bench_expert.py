"""Expert demonstrations on ALFWorld: every game of a split played by ALFWorld's handcoded expert
(`AlfredExpert`, HANDCODED) through the real env server, one JSONL line per game.

    .venv/bin/python -m bench.bench_expert                  # valid_train -> skillos/acting/data/alfworld_expert_valid_train.jsonl
    .venv/bin/python -m bench.bench_expert --limit 2 --out /tmp/demos.jsonl
    .venv/bin/python -m bench.bench_expert --env-url http://127.0.0.1:8010   # a running `skillos serve alfworld`

Without ``--env-url`` it starts `skillos serve alfworld` on a free port (the data of
``SKILLOS_ALFWORLD_DATA``, default ``../shared/data/alfworld``) and stops it at the end. Each game is a
session created with ``"expert": true``; the action taken is always ``info.expert_action`` (the expert's
plan after the last step), until the game is won or the expert has no action left.

One line per game, in the split's order:

    {"task_id", "split", "type", "instruction", "won", "seed", "tries", "first_observation",
     "steps": [{"observation": <what was seen before the action>, "action", "admissible_actions"?}]}

The expert breaks ties at random and sometimes loops (mostly on pick2: it walks back to where it found
the first object); a game it has not won in ``MAX_STEPS`` actions is played again with the next seed, up
to ``--retries`` times (``seed``, ``tries``: the attempt kept, the last one when none won).

``admissible_actions`` (the env's list before each action) only with ``--admissible``: it is ~10x the
rest. Demonstrations are made from the training split: an evaluation split (valid_seen, valid_unseen)
is refused unless ``--allow-eval-split`` says it is meant (e.g. to inspect the expert there, not to
seed skills). The summary (won rate, steps per type, time) is printed as Markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from skillos.clients.envs import AsyncEnvClient
from skillos.protocol.envs import TaskInfo

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "skillos" / "acting" / "data"
EVAL_SPLITS = ("valid_seen", "valid_unseen")  # what runs are scored on: never a source of demonstrations
MAX_STEPS = 100  # a won game takes 4-45 expert actions; one still going at 100 is looping (lost)
SEED = 0  # the expert breaks ties at random; the seed makes its plans repeatable


class EvalSplitRefused(ValueError):
    pass


def check_split(split: str, allow_eval_split: bool) -> None:
    if split in EVAL_SPLITS and not allow_eval_split:
        raise EvalSplitRefused(
            f"refusing to write expert demonstrations of {split!r}: it is an evaluation split (runs are scored "
            f"on it), so demonstrations from it would leak the test games into the skills; use valid_train, "
            f"or pass --allow-eval-split if this is meant (inspection only)")


async def play_expert(client: AsyncEnvClient, task: TaskInfo, *, admissible: bool = False,
                      seed: int = SEED) -> dict:
    """One game followed by the handcoded expert: the JSONL line of the module doc."""
    created = await client.create_session(task_id=task.id, expert=True, seed=seed)
    steps: list[dict] = []
    obs, info, actions = created.observation, created.info, created.admissible_actions
    won = False
    try:
        while (action := info.get("expert_action")) and len(steps) < MAX_STEPS:
            step = {"observation": obs, "action": action}
            if admissible:
                step["admissible_actions"] = actions
            steps.append(step)
            result = await client.step(created.session_id, action)
            obs, info, actions, won = result.observation, result.info, result.admissible_actions, result.won
            if result.done or won:
                break
    finally:
        await client.close_session(created.session_id)
    return {"task_id": task.id, "split": task.split, "type": task.type, "instruction": task.instruction,
            "won": won, "seed": seed, "first_observation": created.observation, "steps": steps}


async def play_split(url: str, split: str, *, limit: int | None = None, concurrency: int = 2,
                     admissible: bool = False, retries: int = 0, on_game=None) -> list[dict]:
    """Every game of ``split`` (the first ``limit``), ``concurrency`` at a time, in the split's order; a
    game the expert lost is played again with the next seeds, up to ``retries`` times (``tries``)."""
    async with AsyncEnvClient(url, timeout=300) as client:
        tasks = await client.tasks(split)
        tasks = tasks[:limit] if limit else tasks
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(task: TaskInfo) -> dict:
            async with gate:
                for attempt in range(retries + 1):
                    line = await play_expert(client, task, admissible=admissible, seed=SEED + attempt)
                    if line["won"]:
                        break
                line["tries"] = attempt + 1
            if on_game:
                on_game(line)
            return line

        return list(await asyncio.gather(*(one(t) for t in tasks)))


def summary_markdown(lines: list[dict], seconds: float) -> str:
    by_type: dict[str, list[dict]] = defaultdict(list)
    for line in lines:
        by_type[line["type"]].append(line)
    known = [t for t in ("pick", "look", "clean", "heat", "cool", "pick2") if t in by_type]
    out = ["| type | games | won | won at the first try | steps of the won (mean, median, min-max) |",
           "|---|---|---|---|---|"]
    for kind in known + sorted(set(by_type) - set(known)):
        games = by_type[kind]
        steps = [len(g["steps"]) for g in games if g["won"]] or [0]
        out.append(f"| {kind} | {len(games)} | {sum(g['won'] for g in games)} | "
                   f"{sum(g['won'] and g.get('tries', 1) == 1 for g in games)} | {statistics.mean(steps):.1f}, "
                   f"{statistics.median(steps):g}, {min(steps)}-{max(steps)} |")
    won = sum(g["won"] for g in lines)
    first = sum(g["won"] and g.get("tries", 1) == 1 for g in lines)
    out.append(f"\n{won}/{len(lines)} won ({100 * won / max(1, len(lines)):.1f} %; {first} at the first try), "
               f"{seconds:.0f} s ({seconds / max(1, len(lines)):.1f} s per game)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", default="valid_train")
    ap.add_argument("--out", type=Path, help="JSONL to write (default: skillos/acting/data/alfworld_expert_<split>.jsonl)")
    ap.add_argument("--limit", type=int, help="the first N games of the split")
    ap.add_argument("--concurrency", type=int, default=2, help="games played at once")
    ap.add_argument("--retries", type=int, default=3,
                    help="a game the expert lost (its tie-breaks can loop) is played again with the next seed")
    ap.add_argument("--admissible", action="store_true", help="keep each step's admissible actions (~10x the size)")
    ap.add_argument("--env-url", help="a running ALFWorld env server (default: start one)")
    ap.add_argument("--allow-eval-split", action="store_true",
                    help=f"allow an evaluation split ({', '.join(EVAL_SPLITS)}); never to seed skills")
    args = ap.parse_args(argv)
    try:
        check_split(args.split, args.allow_eval_split)
    except EvalSplitRefused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = args.out or DATA / f"alfworld_expert_{args.split}.jsonl"
    start = time.perf_counter()

    def progress(line: dict) -> None:
        print(f"{'won ' if line['won'] else 'LOST'} {line['type']:<6} {len(line['steps']):>3} steps  "
              f"try {line['tries']}  {line['instruction']}", file=sys.stderr)

    async def play(url: str) -> list[dict]:
        return await play_split(url, args.split, limit=args.limit, concurrency=args.concurrency,
                                admissible=args.admissible, retries=args.retries, on_game=progress)

    if args.env_url:
        lines = asyncio.run(play(args.env_url))
    else:
        from bench.bench_envs import server

        with server("alfworld") as (url, _):
            lines = asyncio.run(play(url))
    seconds = time.perf_counter() - start
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    print(f"# Handcoded expert on ALFWorld {args.split}\n\n{summary_markdown(lines, seconds)}\n\n"
          f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
