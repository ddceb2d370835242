"""Driver for the multi-rank ZeRO-3 weight-sync test (`test_weight_sync_zero3.py`), one process per
rank: `torchrun --nproc_per_node 2 -m tests.trainer.zero3_ranks CACHE OUT` (gloo on CPU).

Each rank builds a ZeRO-3 engine of SmolLM2, takes one GRPO step, then pushes twice through a stub
vLLM server (`stub_server`): once accepted, once refused with HTTP 500. Each rank writes
OUT/rank-R.json: what it saw, so the test can check that rank 0 wrote the full weights and that
the refusal raised on every rank instead of leaving one blocked.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

import torch


def _say(what: str) -> None:
    print(f"[rank {torch.distributed.get_rank() if torch.distributed.is_initialized() else '?'}] "
          f"{time.strftime('%X')} {what}", file=sys.stderr, flush=True)    # where a hang happened


def main(cache: Path, out: Path) -> None:
    # DeepSpeed's CPU all-reduce would otherwise compile a shared-memory op with g++ (minutes on
    # 2 cores); without it DeepSpeed uses torch.distributed (gloo), which is what we test here
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    from safetensors.torch import load_file

    from services.trainer.config import SyncConfig, TrainConfig
    from services.trainer.grpo.engine import build_engine, close_distributed
    from services.trainer.grpo.policy import load_policy
    from services.trainer.grpo.sync import WeightSync
    from tests.trainer.test_weight_sync_zero3 import one_step, stub_server

    model, tok = load_policy(cache_dir=cache)
    cfg = TrainConfig(output_dir=out, lr=1e-4, deepspeed={"zero_stage": 3})
    _say("loaded")
    engine = build_engine(model, cfg)
    _say("engine")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    one_step(engine, tok, cfg)
    _say("stepped")
    report: dict = {"rank": rank, "world": world,
                    "slice": max(p.ds_tensor.numel() / p.ds_numel for p in engine.module.parameters())}
    sync = WeightSync(SyncConfig(backend="vllm_full", vllm_url="http://vllm.stub", weights_dir=out / "w"), out)
    with stub_server() as calls:
        report["push_s"] = sync.push(engine.module, tok, 1)
        report["last"] = sync.last
        report["calls"] = list(calls)
    _say("pushed")
    want = engine._zero3_consolidated_16bit_state_dict()          # DeepSpeed's own gather (a collective)
    if rank == 0:
        got = load_file(str(out / "w" / "model.safetensors"))
        got.update(load_file(str(out / "w" / "lm_head.safetensors")))
        report["max_diff"] = max(float((got[k] - want[k]).abs().max()) for k in want)
        report["missing"] = sorted(set(want) - set(got))
    t0 = time.perf_counter()
    with stub_server(fail=True):
        try:
            sync.push(engine.module, tok, 2)
        except Exception as exc:  # noqa: BLE001 -- recorded for the test
            report["error"] = f"{type(exc).__name__}: {exc}"
    report["fail_s"] = time.perf_counter() - t0
    _say(f"refused push: {report.get('error')}")
    torch.distributed.barrier()      # both ranks are still in step: no collective was left dangling
    (out / f"rank-{rank}.json").write_text(json.dumps(report, indent=2))
    close_distributed()              # as the trainer does: no gloo group left to the exit-time destructors


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
