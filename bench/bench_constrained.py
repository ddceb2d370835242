"""Schema-constrained sampling in the trainer (services/trainer/decoding/constrained.py): the per-state
vocabulary trie walk (before) vs the string-interior fast path (after), in one run.

The curator policy (SmolLM2-135M, fp32, CPU) samples a batch of curator answers under
`curator_json_schema(1, 2, existing=<shown skills>)`. In a GRPO rollout every decision shows
different skills, so every decision compiles a new schema and starts with cold masks; here each
batch gets one new schema (its rows share it, so the rollout's case, a schema per row, costs the
"trie only" row up to `--batch` times more). Each row runs the same `--batches` batches (same seeds,
same prompt); "trie only" forces the reference walk in every state. Reported: seconds per batch, new tokens per
second, and the plain model's unconstrained rate as the floor.

    .venv/bin/python -m bench.bench_constrained [--batch 4] [--tokens 160] [--batches 2]
"""

from __future__ import annotations

import argparse
import time

import torch


def _prompt(tok) -> list[int]:
    from services.trainer.grpo.policy import encode_prompt
    from skillos.curation import build_curator_messages

    turns = [{"observation": f"You arrive at cabinet {i}. On the cabinet {i}, you see a mug {i} and a plate {i}.",
              "action": f"go to cabinet {i}"} for i in range(1, 13)]
    trajectory = {"task": "put a clean mug in coffeemachine", "turns": turns, "success": False}
    messages = build_curator_messages(trajectory, False, [], output_format="json")
    return encode_prompt(tok, messages, 1024)[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--batches", type=int, default=2)
    args = ap.parse_args()

    from services.trainer.decoding.constrained import SchemaConstraint, Vocabulary
    from services.trainer.grpo.policy import generate_batch, load_policy
    from skillos.curation import curator_json_schema, parse_curator_output

    torch.set_num_threads(2)
    model, tok = load_policy()
    vocab = Vocabulary(tok, model.get_output_embeddings().weight.shape[0])
    prompt = _prompt(tok)
    print(f"prompt {len(prompt)} tokens, batch {args.batch}, {args.tokens} new tokens at most, "
          f"{args.batches} batches per row")

    def run(kind: str) -> tuple[float, int, int]:
        seconds, tokens, readable = 0.0, 0, 0
        for b in range(args.batches):
            torch.manual_seed(b)
            constraints = None
            if kind != "unconstrained":
                schema = curator_json_schema(1, 2, existing=[f"skill-{b}-{kind.split()[0]}"])
                c = SchemaConstraint(schema, vocab, args.tokens)
                if kind == "trie only":
                    c._plain_run_distances = lambda d: None
                constraints = [c] * args.batch
            t0 = time.perf_counter()
            out = generate_batch(model, tok, [prompt] * args.batch, args.tokens, 1.0, constraints=constraints)
            seconds += time.perf_counter() - t0
            tokens += sum(len(ids) for ids in out)
            for ids in out:
                calls = parse_curator_output(tok.decode(ids, skip_special_tokens=True), None)
                readable += bool(calls) and all(c.error is None for c in calls)
        return seconds, tokens, readable

    rows = []
    for kind in ("unconstrained", "trie only", "fast path"):
        seconds, tokens, readable = run(kind)
        rows.append((kind, seconds / args.batches, tokens / seconds, readable))
        print(f"  {kind}: {seconds:.1f} s", flush=True)
    total = args.batch * args.batches
    print("\n| sampling | s per batch | new tok/s | readable answers |")
    print("|---|---:|---:|---:|")
    for kind, per_batch, rate, readable in rows:
        shown = "-" if kind == "unconstrained" else f"{readable}/{total}"
        print(f"| {kind} | {per_batch:.1f} | {rate:.1f} | {shown} |")


if __name__ == "__main__":
    main()
