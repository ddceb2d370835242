"""bench/bench_trainer.py `--init random`: the named architectures are built with the published models'
shapes (checked by their parameter counts, on the meta device: nothing is allocated), the seeded weights
repeat, and the synthetic tokenizer gives TRL what it takes from a tokenizer. Fast, CPU, no network."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from bench.bench_trainer import ARCHS, EOS_ID, PAD_ID, arch_config, random_policy, synthetic_tokenizer


@pytest.mark.parametrize(("arch", "cls", "params"), [
    ("smollm2-135m", "LlamaForCausalLM", 134_515_008),     # HuggingFaceTB/SmolLM2-135M
    ("qwen2.5-0.5b", "Qwen2ForCausalLM", 494_032_768),     # Qwen/Qwen2.5-0.5B
])
def test_architectures_have_the_published_parameter_counts(arch, cls, params):
    cfg = arch_config(arch)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    assert type(model).__name__ == cls
    assert model.lm_head.weight is model.get_input_embeddings().weight          # tied embeddings
    assert sum(p.numel() for p in model.parameters()) == params
    assert cfg.vocab_size == ARCHS[arch][1]["vocab_size"] and cfg.eos_token_id == EOS_ID
    if arch.startswith("qwen"):
        assert model.model.layers[0].self_attn.q_proj.bias is not None       # Qwen2's qkv bias
        assert model.model.layers[0].self_attn.o_proj.bias is None
    else:
        assert model.model.layers[0].self_attn.q_proj.bias is None


def test_random_weights_are_seeded_and_cast():
    a, tok = random_policy("smollm2-135m", "bf16", seed=0, num_hidden_layers=1, vocab_size=512)
    b, _ = random_policy("smollm2-135m", "bf16", seed=0, num_hidden_layers=1, vocab_size=512)
    c, _ = random_policy("smollm2-135m", "bf16", seed=1, num_hidden_layers=1, vocab_size=512)
    assert next(a.parameters()).dtype == torch.bfloat16
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.embed_tokens.weight"], sc["model.embed_tokens.weight"])
    assert len(tok) == 512


def test_synthetic_tokenizer_has_the_vocabulary_and_special_ids():
    tok = synthetic_tokenizer(151936)
    assert len(tok) == 151936 and tok.pad_token_id == PAD_ID and tok.eos_token_id == EOS_ID
    ids = [100, 151935, EOS_ID]
    assert tok.batch_decode([ids], skip_special_tokens=True) == ["<t100> <t151935>"]
    assert tok.convert_tokens_to_ids(["<t100>", "<t151935>"]) == [100, 151935]
