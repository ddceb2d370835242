"""Weight sync under ZeRO-3 on CPU: every rank gathers, rank 0 writes what the server loads.

DeepSpeed's CPU accelerator with gloo. One process (world size 1) already has ZeRO-3's parameter
objects (empty `p.data`, the tensor in `p.ds_tensor`), so it shows that the gathered save is the
real weights; `test_two_ranks_*` runs two ranks under torchrun (each holds half of every tensor)
and checks that a refused push raises on both instead of leaving one blocked. The vLLM server is a
stub (httpx MockTransport); the real-server check is in test_weight_sync_vllm.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file

from services.trainer.config import SyncConfig, TrainConfig
from services.trainer.grpo.policy import apply_lora, encode_prompt, load_policy
from services.trainer.grpo.sample import PolicySample
from services.trainer.grpo.sync import WeightSync, WeightSyncError
from skillos.net import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def stub_server(fail: bool = False):
    """Routes WeightSync's HTTP calls to an in-process stub; yields the list of paths it was asked."""
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if fail:
            return httpx.Response(500, text="stub: reload failed")
        return httpx.Response(200, json={"success": True})

    real = httpx.Client

    class Stub(real):
        def __init__(self, *a, **kw):
            super().__init__(*a, transport=httpx.MockTransport(handle), **kw)

    import services.trainer.grpo.sync as sync_mod

    sync_mod.httpx.Client = Stub
    try:
        yield calls
    finally:
        sync_mod.httpx.Client = real


def one_step(engine, tok, cfg) -> None:
    from services.trainer.grpo.update import update_policy

    prompt, _ = encode_prompt(tok, [{"role": "user", "content": "Name one kitchen tool."}], 256)
    good = tok("A sharp knife.", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    bad = tok("Purple elephants.", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    update_policy(engine, [PolicySample(prompt, good, advantage=1.0), PolicySample(prompt, bad, advantage=-1.0)],
                  cfg, tok.pad_token_id)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model") / "smollm2"
    load_policy(cache_dir=path)
    return path


def _zero3(model, tmp_path, lr=1e-4):
    from services.trainer.grpo.engine import build_engine

    cfg = TrainConfig(output_dir=tmp_path, lr=lr, deepspeed={"zero_stage": 3})
    engine = build_engine(model, cfg)
    params = list(engine.module.parameters())
    # ZeRO-3 really partitioned them: a plain state_dict / save_pretrained would write empty tensors
    assert all(hasattr(p, "ds_numel") and hasattr(p, "ds_status") for p in params)
    assert all(p.numel() == 0 and p.ds_numel > 0 for p in params)
    return engine, cfg


def test_vllm_full_under_zero3_writes_the_full_weights(cache, tmp_path):
    model, tok = load_policy(cache_dir=cache)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    engine, cfg = _zero3(model, tmp_path)
    one_step(engine, tok, cfg)
    sync = WeightSync(SyncConfig(backend="vllm_full", vllm_url="http://vllm.stub", weights_dir=tmp_path / "w"),
                      tmp_path)
    with stub_server() as calls:
        sync.push(engine.module, tok, 1)
    assert calls == ["/collective_rpc", "/reset_prefix_cache"]
    want = engine._zero3_consolidated_16bit_state_dict()         # DeepSpeed's own consolidation
    got = load_file(str(tmp_path / "w" / "model.safetensors"))
    got.update(load_file(str(tmp_path / "w" / "lm_head.safetensors")))
    assert set(want) <= set(got)
    for k, v in want.items():
        assert torch.equal(got[k], v), k
    assert any(not torch.equal(initial[k], want[k]) for k in want), "the step changed nothing"
    assert torch.equal(got["lm_head.weight"], got["model.embed_tokens.weight"])   # untied copy, same values
    assert json.loads((tmp_path / "w" / "config.json").read_text())["tie_word_embeddings"] is False
    print(f"\nZeRO-3 vllm_full push (1 rank, CPU): {sync.last}")

    with stub_server(fail=True), pytest.raises(WeightSyncError, match="stub: reload failed"):
        sync.push(engine.module, tok, 2)


def test_vllm_lora_under_zero3_gathers_only_the_adapter(cache, tmp_path):
    base, tok = load_policy(cache_dir=cache)
    lora = apply_lora(base, r=8, alpha=16, dropout=0.0, target_modules=["q_proj", "v_proj"])
    engine, cfg = _zero3(lora, tmp_path, lr=1e-3)
    one_step(engine, tok, cfg)                      # B = 0 at init; one step makes it nonzero
    sync = WeightSync(SyncConfig(backend="vllm_lora", vllm_url="http://vllm.stub", adapter_name="curator",
                                 weights_dir=tmp_path / "a"), tmp_path)
    with stub_server() as calls:
        sync.push(engine.module, tok, 1)
    assert calls == ["/v1/unload_lora_adapter", "/v1/load_lora_adapter"]
    want = {k.replace(".default", ""): v for k, v in engine._zero3_consolidated_16bit_state_dict().items()
            if "lora_" in k}
    got = load_file(str(tmp_path / "a" / "step-000001" / "adapter_model.safetensors"))
    assert set(got) == set(want) and len(got) == 2 * 2 * 30      # A and B, q and v, 30 layers
    for k, v in want.items():
        assert torch.equal(got[k], v), k
    assert any(float(v.abs().max()) > 0 for k, v in got.items() if "lora_B" in k)
    print(f"\nZeRO-3 vllm_lora push (1 rank, CPU): {sync.last}")


def test_two_ranks_gather_together_and_a_refused_push_raises_on_both(cache, tmp_path):
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)                             # torchrun sets them per rank
    # a real free port: with --master_port 0 the ranks never meet (the run hung until the timeout)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "tests.trainer.zero3_ranks", str(cache), str(tmp_path)]
    proc = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    r0, r1 = (json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1))
    assert r0["world"] == 2 and r0["slice"] <= 0.51       # each rank held half of each tensor
    assert r0["calls"] == ["/collective_rpc", "/reset_prefix_cache"] and r1["calls"] == []
    assert r0["max_diff"] == 0.0 and r0["missing"] == []
    assert "stub: reload failed" in r0["error"] and r0["error"].startswith("WeightSyncError")
    assert r1["error"].startswith("WeightSyncError: rank 0 failed to push the weights")
    print(f"\nZeRO-3 vllm_full push (2 ranks, CPU): rank 0 {r0['last']}, total {r0['push_s']:.2f} s; "
          f"refused push returned on rank 1 after {r1['fail_s']:.2f} s")
