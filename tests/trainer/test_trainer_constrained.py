"""Constrained decoding of curator calls: the grammar of the curator's JSON schema, and sampling
from the real SmolLM2-135M policy under it, with log-probs recomputed under the same masks."""

import json

import pytest
import torch

from services.trainer.decoding.grammar import Automaton, pattern_node, schema_node
from skillos.curation import build_curator_messages, curator_json_schema, parse_curator_output

SCHEMA = curator_json_schema(1, 2)


def _call(name, **args):
    return {"name": name, "arguments": args}


def test_grammar_accepts_exactly_the_schema_in_json_dumps_layout():
    a = Automaton(schema_node(SCHEMA))
    steps = ["Go!", 'say "hi" é', "3rd\nline"]
    ok = [{"calls": [_call("new_skill_insert", skill_name="heat-then-place", description="Heat it.", steps=steps)]},
          {"calls": [_call("skill_delete", skill_name="a"),
                     _call("skill_update", skill_name="b-2", description="Find things", steps=steps * 2)]}]
    for value in ok:
        assert a.matches(json.dumps(value, ensure_ascii=False).encode())
    bad = [{"calls": []},                                                       # minItems 1
           {"calls": [_call("skill_delete", skill_name="a")] * 3},                # maxItems 2
           {"calls": [_call("skill_delete", skill_name="-a")]},                   # pattern
           {"calls": [_call("skill_delete", skill_name="a-b-c-d-e-f-g")]},        # {0,5}
           {"calls": [_call("skill_remove", skill_name="a")]},                    # const
           {"calls": [_call("new_skill_insert", skill_name="a")]},                # required fields
           {"calls": [_call("new_skill_insert", skill_name="a", description="Heat it.", steps=["xyz"] * 2)]},  # 3+
           {"calls": [_call("skill_update", skill_name="a", description="Heat it.", steps=["xyz"] * 7)]},  # <= 6
           {"calls": [_call("new_skill_insert", skill_name="a", description="", steps=["xyz"] * 3)]},  # empty
           {"calls": [_call("new_skill_insert", skill_name="a", description="Heat it.", steps=["", "a", "b"])]},
           {"calls": [_call("new_skill_insert", skill_name="a", description="Heat it.", steps=["x" * 201] * 3)]}]
    for value in bad:
        assert not a.matches(json.dumps(value).encode()), value
    assert not a.matches(json.dumps(ok[0], indent=1).encode())                 # fixed layout
    # fewest bytes to a complete answer: the shortest delete call
    shortest = json.dumps({"calls": [_call("skill_delete", skill_name="a")]}).encode()
    assert a.dist[a.start] == len(shortest)


def test_pattern_subset_and_unsupported_schemas_fail_loudly():
    a = Automaton(pattern_node("^(ab|c){2,3}[0-9]?$"))
    assert a.matches(b"abc") and a.matches(b"ccc7") and not a.matches(b"c") and not a.matches(b"cccc")
    with pytest.raises(ValueError, match="anchored"):
        pattern_node("[a-z]+")
    with pytest.raises(ValueError, match="required"):
        schema_node({"type": "object", "properties": {"a": {"type": "string"}}})
    with pytest.raises(ValueError, match="not supported"):
        schema_node({"type": "number"})


@pytest.mark.slow
def test_policy_samples_valid_calls_and_recomputes_the_sampling_logprobs(tmp_path):
    from transformers import LogitsProcessorList

    from services.trainer.decoding.constrained import GrammarCache, GrammarLogitsProcessor
    from services.trainer.grpo.policy import encode_prompt, load_policy, sequence_logprobs

    torch.manual_seed(0)
    model, tok = load_policy(cache_dir=tmp_path / "smollm2")
    model.eval()
    budget = 90
    cache = GrammarCache(tok, model.get_output_embeddings().weight.shape[0], budget)
    constraint = cache.for_response_format({"type": "json_object", "schema": SCHEMA})
    assert cache.for_response_format({"type": "json_schema", "json_schema": {"schema": SCHEMA}}) is constraint
    trajectory = {"task": "put a clean mug in the coffee machine",
                  "turns": [{"observation": "You are in a kitchen.", "action": "go to sinkbasin 1"}]}
    messages = build_curator_messages(trajectory, False, [], output_format="json")
    prompt, _ = encode_prompt(tok, messages, 1024)
    for _ in range(3):
        out = model.generate(torch.tensor([prompt]), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=budget, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                             logits_processor=LogitsProcessorList([GrammarLogitsProcessor([constraint], tok.eos_token_id)]),
                             output_scores=True, return_dict_in_generate=True)
        ids = out.sequences[0, len(prompt):].tolist()
        assert ids[-1] == tok.eos_token_id and len(ids) <= budget    # closed within the budget
        calls = parse_curator_output(tok.decode(ids, skip_special_tokens=True), None)
        assert calls and all(c.error is None and c.name for c in calls)
        # the sampling distribution of each generated token, as generate saw it (masked, renormalised)
        sampled = torch.stack([torch.log_softmax(s[0].float(), -1)[t] for s, t in zip(out.scores, ids)])
        allowed = constraint.masks(ids)
        with torch.no_grad():
            lp, mask = sequence_logprobs(model, [prompt], [ids], tok.pad_token_id, 1.0, [allowed])
        assert torch.allclose(lp[0, :len(ids)], sampled, atol=2e-3)
        forced = allowed.sum(-1) == 1
        assert torch.all(lp[0, :len(ids)][forced].abs() < 1e-5)            # forced: log q = 0
        assert mask[0, :len(ids)].bool().tolist() == (~forced).tolist()      # and not in the loss
        assert 0 < int((~forced).sum()) < len(ids)


def test_grammar_of_a_request_that_showed_skills_allows_edits_of_those_only():
    steps = ["go to PLACE", "open PLACE", "take OBJECT from PLACE"]
    shown = Automaton(schema_node(curator_json_schema(1, 2, existing=["find-object"])))
    assert shown.matches(json.dumps({"calls": [_call("skill_update", skill_name="find-object",
                                                     description="Find things.", steps=steps)]}).encode())
    assert not shown.matches(json.dumps({"calls": [_call("skill_delete", skill_name="other")]}).encode())
    empty = Automaton(schema_node(curator_json_schema(1, 2, existing=[])))
    assert not empty.matches(json.dumps({"calls": [_call("skill_delete", skill_name="find-object")]}).encode())
    assert empty.matches(json.dumps({"calls": [_call("new_skill_insert", skill_name="find-object",
                                                     description="Find things.", steps=steps)]}).encode())


def test_grammar_cache_keeps_the_most_recent_schemas_and_samples_keep_theirs():
    """An agent's action schema changes every turn: the cache is bounded, and a constraint it dropped
    still replays the masks of the completion sampled under it."""
    from services.trainer.decoding.constrained import GrammarCache
    from services.trainer.grpo.policy import load_tokenizer
    from skillos.acting.prompt import action_schema

    tok = load_tokenizer()
    cache = GrammarCache(tok, len(tok), 64, max_schemas=2)
    fmt = [{"type": "json_schema", "json_schema": {"schema": action_schema([f"go to desk {i}", "look"])}}
           for i in range(3)]
    first = cache.for_response_format(fmt[0])
    assert cache.for_response_format(fmt[0]) is first                    # compiled once
    cache.for_response_format(fmt[1])
    cache.for_response_format(fmt[0])                                     # used again: the most recent
    cache.for_response_format(fmt[2])                                     # evicts fmt[1], not fmt[0]
    assert cache.for_response_format(fmt[0]) is first
    assert len(cache._by_schema) == 2
    ids = tok('{"thought": "", "action": "look"}', add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    kept = cache.for_response_format(fmt[1])                              # recompiled after eviction
    assert kept.masks(ids).shape == (len(ids), len(tok))


def test_string_interior_fast_path_equals_the_trie_walk_on_the_curator_schema():
    """`_distances_after` gathers plain tokens along one chain of states inside strings; on every state
    a curator answer passes through (structure, names, enums, escapes, string bounds) it must give
    exactly what walking the whole vocabulary byte by byte gives."""
    from services.trainer.decoding.constrained import SchemaConstraint, Vocabulary
    from services.trainer.grpo.policy import load_tokenizer

    tok = load_tokenizer()
    vocab = Vocabulary(tok, len(tok))
    schema = curator_json_schema(1, 2, existing=["find-object", "heat-then-place"])
    c = SchemaConstraint(schema, vocab, 400)
    answer = {"calls": [_call("skill_update", skill_name="heat-then-place", description="Heat it: \"é\" \\ ok.",
                              steps=["go to PLACE", "x" * 197, "take OBJECT from PLACE"]),
                        _call("new_skill_insert", skill_name="a-b", description="Find things.",
                              steps=["abc"] * 6)]}
    data = json.dumps(answer, ensure_ascii=False).encode()
    assert c.automaton.matches(data)
    states, d = [], c.start
    for b in data:
        states.append(d)
        d = c.automaton.step(d, b)
    # the trie walk takes ~0.2 s a state inside a string: compare the states next to a non-plain byte
    # (the ends of strings, escapes, structure) and every 32nd elsewhere (the 197-byte run included)
    plain = set(c.vocab.plain_bytes)
    near = {i + k for i, b in enumerate(data) if b not in plain for k in (-1, 0, 1)}
    picked = [states[i] for i in range(len(data)) if i in near or i % 32 == 0]
    fast_used = 0
    for d in dict.fromkeys(picked):
        expected = c._trie_distances(d)
        fast = c._plain_run_distances(d)
        if fast is not None:
            fast_used += 1
            assert torch.equal(fast, expected), d
        assert torch.equal(c._distances_after(d), expected), d
    assert fast_used > 20, fast_used     # the string interiors took the fast path
