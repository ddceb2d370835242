"""`sequence_logprobs` runs the LM head only from the earliest completion position on
(`logits_to_keep`): the log-probs must equal those from full-width logits, for prompts of different
lengths, an empty completion and a model whose forward has no `logits_to_keep`. Fast, CPU."""

import torch

from bench.bench_trainer import random_policy
from services.trainer.grpo.loss import token_logprobs
from services.trainer.grpo.policy import sequence_logprobs


def _reference(model, prompts, comps, pad, temperature):
    """The log-probs from full-width logits, one sequence at a time (no padding at all)."""
    tc = max(len(c) for c in comps)
    rows = []
    for p, c in zip(prompts, comps):
        if not c:
            rows.append(torch.zeros(tc))
            continue
        logits = model(input_ids=torch.tensor([p + c]), use_cache=False).logits[0]
        lp = token_logprobs(logits[len(p) - 1:len(p) - 1 + len(c)] / temperature, torch.tensor(c))
        rows.append(torch.nn.functional.pad(lp, (0, tc - len(c))))
    return torch.stack(rows)


class _NoKeep(torch.nn.Module):
    """A causal LM whose forward takes no `logits_to_keep` (older or custom models)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask=None, use_cache=False):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=use_cache)


def test_lm_head_on_completion_positions_gives_the_full_width_logprobs():
    torch.manual_seed(0)
    model, tok = random_policy("qwen2.5-0.5b", "fp32", seed=0, num_hidden_layers=2, vocab_size=300,
                               hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
    model.eval()
    # the shortest prompt with a completion has 4 tokens: the LM head starts at position 3 (the empty
    # completion's 2-token prompt does not count)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 22], [15, 16], [20, 21, 23, 24, 25]]
    comps = [[30, 31, 32], [33, 34, 35, 36, 37], [], [38]]
    width = max(len(p) + len(c) for p, c in zip(prompts, comps))
    head_positions = []
    hook = model.lm_head.register_forward_hook(lambda mod, args, out: head_positions.append(args[0].shape[1]))
    with torch.no_grad():
        want = _reference(model, prompts, comps, tok.pad_token_id, 0.7)
        head_positions.clear()
        got, mask = sequence_logprobs(model, prompts, comps, tok.pad_token_id, temperature=0.7)
        assert head_positions == [width - 3]          # the LM head ran on the needed positions only
        head_positions.clear()
        plain, _ = sequence_logprobs(_NoKeep(model), prompts, comps, tok.pad_token_id, temperature=0.7)
        assert head_positions == [width]              # no logits_to_keep: every position, cut after
    hook.remove()
    assert got.shape == want.shape == (4, 5)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0]]
    torch.testing.assert_close(got * mask, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(plain * mask, want, atol=1e-5, rtol=1e-5)


def test_a_lora_wrapped_policy_also_runs_the_head_on_completion_positions_only():
    from peft import LoraConfig, get_peft_model

    model, tok = random_policy("qwen2.5-0.5b", "fp32", seed=0, num_hidden_layers=1, vocab_size=300,
                               hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
    lora = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).eval()
    seen = []
    hook = model.lm_head.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[1]))
    with torch.no_grad():
        got, _ = sequence_logprobs(lora, [[5, 6, 7, 8, 9, 10]], [[30, 31]], tok.pad_token_id)
        want = _reference(lora, [[5, 6, 7, 8, 9, 10]], [[30, 31]], tok.pad_token_id, 1.0)
    hook.remove()
    assert seen[0] == 3                                # positions 5..7 of 8
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
