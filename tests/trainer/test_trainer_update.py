"""One GRPO update of the real SmolLM2-135M policy inside a DeepSpeed engine (CPU)."""

import os
import random

import pytest
import torch

from services.trainer.config import TrainConfig
from services.trainer.data import GroupSampler, SamplerState
from services.trainer.grouping.io import GroupTask, TaskGroup
from services.trainer.grpo import checkpoint
from services.trainer.grpo.engine import build_engine
from services.trainer.grpo.policy import encode_prompt, load_policy, sequence_logprobs
from services.trainer.grpo.sample import PolicySample
from services.trainer.grpo.update import update_policy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    cache = tmp_path_factory.mktemp("model") / "smollm2"
    _model, tok = load_policy(cache_dir=cache)
    return cache, tok


def _cfg(tmp_path, **kw) -> TrainConfig:
    return TrainConfig(output_dir=tmp_path, lr=kw.pop("lr", 2e-5), **kw)


def _samples(tok) -> list[PolicySample]:
    prompt, _ = encode_prompt(tok, [{"role": "user", "content": "Name one kitchen tool."}], 256)
    good = tok("A sharp knife.", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    bad = tok("Purple elephants.", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    return [PolicySample(prompt, good, advantage=1.0), PolicySample(prompt, bad, advantage=-1.0)]


def _logps(engine, samples, pad):
    with torch.no_grad():
        lp, mask = sequence_logprobs(engine, [s.prompt_ids for s in samples],
                                     [s.completion_ids for s in samples], pad)
    return (lp * mask).sum(1)


def _engine(cache, tmp_path, **kw):
    model, _ = load_policy(cache_dir=cache)
    return build_engine(model, _cfg(tmp_path, **kw))


def test_one_step_changes_weights_and_moves_logprobs_by_advantage(policy, tmp_path):
    cache, tok = policy
    engine = _engine(cache, tmp_path)
    samples = _samples(tok)
    before_w = {n: p.detach().clone() for n, p in engine.module.named_parameters()}

    # all advantages 0 (every rollout of the group got the same reward): no gradient, no change
    flat = [PolicySample(s.prompt_ids, s.completion_ids, advantage=0.0) for s in samples]
    stats = update_policy(engine, flat, _cfg(tmp_path), tok.pad_token_id)
    assert stats["skipped"] == 1.0 and stats["sequences"] == 2      # nothing to run through the model
    assert all(torch.equal(before_w[n], p) for n, p in engine.module.named_parameters())

    before = _logps(engine, samples, tok.pad_token_id)
    stats = update_policy(engine, samples, _cfg(tmp_path), tok.pad_token_id)
    after = _logps(engine, samples, tok.pad_token_id)
    changed = sum(int(not torch.equal(before_w[n], p)) for n, p in engine.module.named_parameters())
    assert changed > 0.9 * len(before_w), f"only {changed}/{len(before_w)} tensors changed"
    assert engine.global_steps == 1      # the all-zero batch took no optimizer step
    assert stats["tokens"] == sum(len(s.completion_ids) for s in samples)
    assert stats["grad_norm"] > 0
    # first update: old == current policy, so the ratio is 1 and nothing is clipped
    assert stats["clip_fraction"] == 0.0
    assert after[0] > before[0], "log-prob of the positively-advantaged completion should rise"
    assert after[1] < before[1], "log-prob of the negatively-advantaged completion should fall"


def test_the_detached_old_logprobs_give_the_update_of_the_recomputed_ones(policy, tmp_path, monkeypatch):
    """Without dropout the old-log-prob pass is skipped (grpo/update.py); the step must be the one the
    recomputing path takes, weight for weight."""
    from services.trainer.grpo import update

    cache, tok = policy
    samples = _samples(tok)
    torch.manual_seed(0)
    fast = _engine(cache, tmp_path / "fast")
    stats = update_policy(fast, samples, _cfg(tmp_path), tok.pad_token_id)
    assert stats["old_logprobs_detached"] == 1.0

    monkeypatch.setattr(update, "_has_dropout", lambda module: True)   # as if a dropout were on
    torch.manual_seed(0)
    slow = _engine(cache, tmp_path / "slow")
    stats_slow = update_policy(slow, samples, _cfg(tmp_path), tok.pad_token_id)
    assert stats_slow["old_logprobs_detached"] == 0.0
    assert stats["grad_norm"] == pytest.approx(stats_slow["grad_norm"], rel=1e-5)
    got = dict(slow.module.named_parameters())
    worst = max(float((p - got[n]).abs().max()) for n, p in fast.module.named_parameters())
    assert worst < 1e-6, f"weights differ by up to {worst}"


def test_dropout_is_seen_in_modules_and_in_the_config():
    from types import SimpleNamespace

    from services.trainer.grpo.update import _has_dropout

    plain = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.0))
    assert not _has_dropout(plain)
    assert _has_dropout(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1)))
    plain.config = SimpleNamespace(attention_dropout=0.1)
    assert _has_dropout(plain)


def test_checkpoint_resume_is_exact(policy, tmp_path):
    cache, tok = policy
    cfg = _cfg(tmp_path)
    groups = [TaskGroup(id=f"g{i}", env="alfworld", tasks=[GroupTask(id=f"t{i}a"), GroupTask(id=f"t{i}b")])
              for i in range(5)]
    samples = _samples(tok)

    # uninterrupted: step, (checkpoint), step
    torch.manual_seed(1)
    random.seed(1)
    a = _engine(cache, tmp_path / "a")
    sampler = GroupSampler(groups, seed=3)
    sampler.next_batch(3)
    update_policy(a, samples, cfg, tok.pad_token_id)
    checkpoint.save(a, tmp_path / "ck", 1, sampler.state, keep=2)
    rng_after_save = (torch.rand(3), random.random())
    next_groups = [g.id for g in sampler.next_batch(4)]
    update_policy(a, samples, cfg, tok.pad_token_id)
    want = {n: p.detach().clone() for n, p in a.module.named_parameters()}
    del a

    # resumed: a fresh engine from the original weights, then the checkpoint
    torch.manual_seed(99)
    random.seed(99)
    b = _engine(cache, tmp_path / "b")
    state = checkpoint.load(b, tmp_path / "ck")
    assert state["step"] == 1 and state["sampler"] == SamplerState(epoch=0, index=3)
    assert torch.equal(torch.rand(3), rng_after_save[0]) and random.random() == rng_after_save[1]
    resumed = GroupSampler(groups, seed=3, state=state["sampler"])
    assert [g.id for g in resumed.next_batch(4)] == next_groups
    update_policy(b, samples, cfg, tok.pad_token_id)
    got = dict(b.module.named_parameters())
    mismatched = [n for n, p in want.items() if not torch.equal(p, got[n].detach())]
    assert not mismatched, f"{len(mismatched)} tensors differ after resume, e.g. {mismatched[:3]}"


def test_a_single_process_never_rendezvouses_on_an_inherited_port(monkeypatch):
    """A trainer started by a process that ran an engine itself (a test, a notebook) inherits its
    MASTER_PORT, which that process's store still holds: binding it failed with EADDRINUSE. One
    process picks a port of its own; torchrun's agent store (a port to connect to) is kept."""
    import socket

    from services.trainer.grpo.engine import prepare_distributed_env

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                     "MASTER_PORT": port}.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
        prepare_distributed_env()
        mine = int(os.environ["MASTER_PORT"])
        assert str(mine) != port
        with socket.socket() as s:
            s.bind(("127.0.0.1", mine))                   # free to bind
        monkeypatch.setenv("MASTER_PORT", port)
        monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
        prepare_distributed_env()
        assert os.environ["MASTER_PORT"] == port


def test_a_lora_checkpoint_holds_the_adapter_alone_and_resumes_exactly(policy, tmp_path):
    """LoRA on the last 2 blocks: the checkpoint keeps the trained tensors (not the frozen base), and a
    fresh engine (another LoRA init) resumed from it takes the same next step."""
    from services.trainer.grpo.policy import apply_lora

    cache, tok = policy
    cfg = _cfg(tmp_path)
    samples = _samples(tok)

    def lora_engine(seed: int, path, last_layers: int = 2):
        torch.manual_seed(seed)
        model, _ = load_policy(cache_dir=cache)
        model = apply_lora(model, 8, 16, 0.0, ["q_proj", "v_proj"], last_layers=last_layers)
        return build_engine(model, _cfg(path))

    a = lora_engine(1, tmp_path / "a")
    trained = sorted(n for n, p in a.module.named_parameters() if p.requires_grad)
    assert trained and all(".layers.28." in n or ".layers.29." in n for n in trained), trained[:4]
    update_policy(a, samples, cfg, tok.pad_token_id)
    checkpoint.save(a, tmp_path / "ck", 1, SamplerState(), keep=1)
    saved = torch.load(next((tmp_path / "ck" / "step-000001").glob("*model_states.pt")), weights_only=False)["module"]
    # the trained tensors, and of the frozen base only SmolLM2's tied LM head (DeepSpeed does not see it as frozen)
    assert set(trained) <= saved.keys() and saved.keys() - set(trained) <= {"base_model.model.lm_head.weight"}
    update_policy(a, samples, cfg, tok.pad_token_id)
    want = {n: p.detach().clone() for n, p in a.module.named_parameters()}
    del a

    b = lora_engine(2, tmp_path / "b")
    assert checkpoint.load(b, tmp_path / "ck")["step"] == 1
    update_policy(b, samples, cfg, tok.pad_token_id)
    got = dict(b.module.named_parameters())
    mismatched = [n for n, p in want.items() if not torch.equal(p, got[n].detach())]
    assert not mismatched, f"{len(mismatched)} tensors differ after resume, e.g. {mismatched[:3]}"
    del b

    # a run with another lora_layers does not resume from it half-initialised (a non-strict load would)
    with pytest.raises(RuntimeError, match="does not hold this run's trained tensors"):
        checkpoint.load(lora_engine(3, tmp_path / "c", last_layers=3), tmp_path / "ck")
