"""Curator benchmarks: call recovery and speed of the parser, and the service's own overhead.

    .venv/bin/python -m bench.bench_curator                       # parser only (no services)
    .venv/bin/python -m bench.bench_curator --live URL --n 5      # + a running curator at URL

1. Parser, on every recorded real completion and malformed case in tests/curator/data: how many calls
   it reads and how fast, against the baseline "strict": json.loads of the whole completion in the
   OpenAI tool-call shape (what a parser without fallbacks reads).
2. Live (optional): N curate decisions (apply=false) against a running curator; orchestration overhead
   per decision = total time − LLM time (p50/p95), against the LLM time itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from skillos.curation import parse_curator_output

DATA = Path(__file__).resolve().parent.parent / "tests" / "curator" / "data"


def _corpus() -> list[tuple[str | None, list | None, int]]:
    """(content, tool_calls, number of readable calls a person finds in it)."""
    items = []
    for case in json.loads((DATA / "malformed.json").read_text()):
        readable = sum(1 for e in case["expect"] if "error" not in e)
        items.append((case.get("content"), case.get("tool_calls"), readable))
    expectations = json.loads((DATA / "expectations.json").read_text())
    for name, expect in expectations.items():
        rec = json.loads((DATA / "recorded" / name).read_text())
        items.append((rec["content"], rec["tool_calls"], sum(1 for e in expect if "error" not in e)))
    return items


def strict_parse(content: str | None, tool_calls: list | None) -> int:
    """Baseline: structured tool_calls, or the completion as one JSON object {"calls": [...]}/{"name"...}."""
    if tool_calls:
        ok = 0
        for tc in tool_calls:
            try:
                json.loads(tc["function"]["arguments"])
                ok += 1
            except (KeyError, TypeError, ValueError):
                pass
        return ok
    try:
        data = json.loads(content or "")
    except ValueError:
        return 0
    if isinstance(data, dict) and isinstance(data.get("calls"), list):
        return sum(1 for c in data["calls"] if isinstance(c, dict) and "name" in c)
    return 1 if isinstance(data, dict) and "name" in data and isinstance(data.get("arguments"), dict) else 0


def bench_parser(repeat: int = 200) -> None:
    corpus = _corpus()
    readable = sum(r for *_, r in corpus)
    ours = sum(min(r, sum(1 for c in parse_curator_output(ct, tc) if c.ok)) for ct, tc, r in corpus)
    strict = sum(min(r, strict_parse(ct, tc)) for ct, tc, r in corpus)
    timings = {}
    for name, fn in (("ours", parse_curator_output), ("strict", strict_parse)):
        start = time.perf_counter()
        for _ in range(repeat):
            for content, tool_calls, _ in corpus:
                fn(content, tool_calls)
        timings[name] = (time.perf_counter() - start) / (repeat * len(corpus)) * 1e6
    print(f"\nParser on {len(corpus)} completions ({readable} readable calls, judged by hand)")
    print(f"{'parser':<28}{'calls read':>12}{'recall':>9}{'µs/completion':>16}")
    print(f"{'strict JSON (baseline)':<28}{strict:>12}{strict / readable:>9.0%}{timings['strict']:>16.1f}")
    print(f"{'skillos fallback parser':<28}{ours:>12}{ours / readable:>9.0%}{timings['ours']:>16.1f}")


def bench_live(url: str, n: int) -> None:
    import httpx

    traj = json.loads((DATA / "trajectory_clean_apple.json").read_text())
    overhead, llm = [], []
    for seed in range(n):
        r = httpx.post(f"{url}/v1/curate", json={"trajectory": traj, "self_judged_success": True, "apply": False,
                                                  "seed": seed}, timeout=900)
        r.raise_for_status()
        usage = r.json()["usage"]
        llm.append(usage["llm_seconds"])
        overhead.append(usage["total_seconds"] - usage["llm_seconds"])
    q = statistics.quantiles
    print(f"\nCurator service, {n} decisions (apply=false) at {url}")
    print(f"{'':<30}{'p50':>10}{'p95':>10}")
    p95 = (lambda xs: q(xs, n=20)[-1] if len(xs) >= 2 else xs[0])
    print(f"{'LLM time (baseline) s':<30}{statistics.median(llm):>10.2f}{p95(llm):>10.2f}")
    print(f"{'curator overhead ms':<30}{statistics.median(overhead) * 1e3:>10.2f}{p95(overhead) * 1e3:>10.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--live", metavar="CURATOR_URL", help="also measure a running curator service")
    ap.add_argument("--n", type=int, default=5)
    args = ap.parse_args()
    bench_parser()
    if args.live:
        bench_live(args.live, args.n)


if __name__ == "__main__":
    main()
