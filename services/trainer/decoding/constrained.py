"""Schema-constrained sampling for the in-process curator policy, and the same masks for the loss.

Why: free-text SmolLM2-135M almost never writes a call the parser can read, so every rollout of a
group scores alike and every advantage is 0. The curator service solves this for llama.cpp with
a JSON-schema grammar; `PolicyLLM` honours the same `response_format` here, so the trained policy
is the one that will be served.

The sampled policy is q(t) = p(t)·1[t allowed] / Σ_allowed p: the model at temperature 1, with
disallowed tokens removed and the rest renormalised. Inside strings almost every token is allowed,
so sampling there is the model's own; structural tokens are usually the only allowed token.
The loss must use log q of the generated tokens, for both π_old and π_θ: that is the distribution
the tokens were drawn from, so the importance ratio and the policy gradient are exact, and a
forced token (one allowed choice) has log q = 0 and no gradient, instead of an advantage-weighted
push on a token the policy never chose. The masks are a deterministic function of the token ids
and the budget, so the trainer rebuilds them from the ids (`masks`) rather than storing them.

Budget: a token is allowed only if, after it, the object can still be closed within the tokens
left (`Automaton.dist` bytes, one single-byte token each, plus EOS), so a completion never ends
cut off in the middle of a string.

Speed: a string with maxLength n is n distinct DFA states (the position is counted), so every
token generated inside a description or a step lands in a state never seen before, and walking the
whole vocabulary trie per state in Python cost ~0.1 s a token per row (generation was 310 of a
CPU training step's 334 s of rollouts). Inside a string every plain byte leads to the same next state, whichever byte it is;
`_distances_after` then follows that one chain of states and gathers each plain token's outcome
from it in one vectorised step, and walks in Python only the few tokens with a quote, a backslash
or a control byte (and everything in states where bytes differ: structure, names, enums).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

import torch

from services.trainer.decoding.grammar import STRING_CHAR, Automaton, schema_node

_FAR = 32767   # int16 "cannot go there"


def bytes_to_unicode() -> dict[int, str]:
    """The byte ↔ printable-character table of byte-level BPE vocabularies (GPT-2 style)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


class Vocabulary:
    """Each token's bytes (None for special tokens) and a byte trie over them."""

    def __init__(self, tokenizer, size: int):
        decode = {c: b for b, c in bytes_to_unicode().items()}
        special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
        pieces = tokenizer.convert_ids_to_tokens(list(range(min(size, len(tokenizer)))))
        self.size = size
        self.eos = tokenizer.eos_token_id
        self.token_bytes: list[bytes | None] = [None] * size
        for i, piece in enumerate(pieces):
            if i in special or piece is None:
                continue
            if not all(ch in decode for ch in piece):
                raise ValueError("constrained decoding needs a byte-level BPE tokenizer "
                                 f"(token {i} {piece!r} is not byte-level)")
            self.token_bytes[i] = bytes(decode[ch] for ch in piece)
        single = {b[0] for b in self.token_bytes if b is not None and len(b) == 1}
        if not set(range(0x20, 0x7F)) <= single:
            raise ValueError("the vocabulary lacks single-byte tokens for printable ASCII: "
                             "the token budget could not be guaranteed")
        self.children: list[dict[int, int]] = [{}]
        self.ends: list[list[int]] = [[]]
        for tok, data in enumerate(self.token_bytes):
            if not data:
                continue
            node = 0
            for b in data:
                nxt = self.children[node].get(b)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][b] = nxt
                    self.children.append({})
                    self.ends.append([])
                node = nxt
            self.ends[node].append(tok)
        # For the string-interior fast path: each token's length, and how many of its leading bytes
        # are plain string bytes (no '"', no '\\', no control byte); tokens not all plain are listed.
        plain = [bool(STRING_CHAR >> b & 1) for b in range(256)]
        lengths, plain_lens, self.mixed = [0] * size, [0] * size, []
        for tok, data in enumerate(self.token_bytes):
            if not data:
                continue
            k = 0
            while k < len(data) and plain[data[k]]:
                k += 1
            lengths[tok], plain_lens[tok] = len(data), k
            if k < len(data):
                self.mixed.append(tok)
        self.plain_lens = plain_lens
        self.lengths = torch.tensor(lengths, dtype=torch.long)
        self.pure = torch.tensor([d is not None and len(d) > 0 and pl == len(d)
                                  for d, pl in zip(self.token_bytes, plain_lens)])
        self.max_len = max(lengths, default=0)
        self.plain_bytes = [b for b in range(256) if plain[b]]


class SchemaConstraint:
    """Token masks for one JSON schema, one vocabulary and one token budget."""

    def __init__(self, schema: dict[str, Any], vocab: Vocabulary, max_new_tokens: int):
        self.automaton = Automaton(schema_node(schema))
        self.vocab, self.max_new_tokens = vocab, max_new_tokens
        if self.automaton.dist[self.automaton.start] + 1 > max_new_tokens:
            raise ValueError(f"the shortest answer of the schema needs {self.automaton.dist[self.automaton.start]} "
                             f"bytes; max_new_tokens={max_new_tokens} cannot guarantee it")
        self._next_dist: dict[int, torch.Tensor] = {}
        self._farthest: dict[int, int] = {}
        self._masks: dict[tuple[int, int], torch.Tensor] = {}
        self._uniform: dict[int, int | None] = {}
        self._lock = threading.Lock()   # generation thread and trainer share the lazy DFA

    @property
    def start(self) -> int:
        return self.automaton.start

    def _distances_after(self, d: int) -> torch.Tensor:
        """[V] int16: `dist` of the state each token leads to from `d` (_FAR if it cannot follow)."""
        cached = self._next_dist.get(d)
        if cached is None:
            cached = self._plain_run_distances(d)
            if cached is None:
                cached = self._trie_distances(d)
            self._next_dist[d] = cached
            allowed = cached[cached < _FAR]
            self._farthest[d] = int(allowed.max()) if allowed.numel() else 0
        return cached

    def _dist_of(self, s: int) -> int:
        return _FAR if s < 0 else min(self.automaton.dist[s], _FAR - 1)

    def _trie_distances(self, d: int) -> torch.Tensor:
        """The reference: every token walked byte by byte from `d`, sharing prefixes through the trie."""
        a, v = self.automaton, self.vocab
        ids, dists = [], []
        stack = [(0, d)]
        while stack:
            node, s = stack.pop()
            for b, child in v.children[node].items():
                s2 = a.step(s, b)
                if s2 < 0:
                    continue
                for tok in v.ends[child]:
                    ids.append(tok)
                    dists.append(self._dist_of(s2))
                stack.append((child, s2))
        out = torch.full((v.size,), _FAR, dtype=torch.int16)
        if ids:
            out[torch.tensor(ids)] = torch.tensor(dists, dtype=torch.int16)
        return out

    def _uniform_plain_step(self, s: int) -> int | None:
        """The state every plain string byte leads to from `s`, or None when they lead to different ones."""
        if s in self._uniform:
            return self._uniform[s]
        a = self.automaton
        plain = self.vocab.plain_bytes
        first = a.step(s, plain[0])
        if any(a.step(s, b) != first for b in plain[1:]):
            first = None
        self._uniform[s] = first
        return first

    def _plain_run_distances(self, d: int) -> torch.Tensor | None:
        """`_distances_after(d)` for a state inside a free string; None when `d` is not one."""
        a, v = self.automaton, self.vocab
        chain = [d]                      # chain[k]: the state after any k plain bytes from d (-1: dead)
        while len(chain) <= v.max_len and chain[-1] >= 0:
            nxt = self._uniform_plain_step(chain[-1])
            if nxt is None:
                break
            chain.append(nxt)
        if len(chain) == 1:
            return None                  # plain bytes differ right away: the trie walk prunes well here
        known = len(chain) - 1           # chain is exact up to this many plain bytes
        chain_dist = torch.tensor([self._dist_of(s) for s in chain], dtype=torch.int16)
        out = torch.full((v.size,), _FAR, dtype=torch.int16)
        whole = v.pure & (v.lengths <= known)
        out[whole] = chain_dist[v.lengths[whole]]
        # the rest: tokens with a non-plain byte, and plain ones longer than the known chain unless
        # it ended dead (then they are too: _FAR already)
        rest = list(v.mixed)
        if chain[known] >= 0:            # the chain stopped at a state where plain bytes differ
            rest += torch.nonzero(v.pure & (v.lengths > known)).flatten().tolist()
        dists = []
        for tok in rest:
            data = v.token_bytes[tok]
            j = min(v.plain_lens[tok], known)
            s = a.walk(chain[j], data[j:]) if chain[j] >= 0 else -1
            dists.append(self._dist_of(s))
        if rest:
            out[torch.tensor(rest)] = torch.tensor(dists, dtype=torch.int16)
        return out

    def mask(self, d: int, remaining: int) -> torch.Tensor:
        """[V] bool: the tokens allowed in state `d` with `remaining` tokens left (this one included).
        Cached and shared: do not modify the result."""
        with self._lock:
            after = self._distances_after(d)
            # after this token, remaining-1 are left: dist bytes (one token each) and EOS must fit
            limit = min(remaining - 2, self._farthest[d])     # beyond the farthest, the budget binds nothing
            key = (d, limit)
            cached = self._masks.get(key)
            if cached is None:
                cached = after <= limit
                if self.automaton.accepting(d) or not bool(cached.any()):
                    cached[self.vocab.eos] = True   # also the way out of a dead end: an unreadable answer
                self._masks[key] = cached
        return cached

    def advance(self, d: int, token: int) -> int:
        data = self.vocab.token_bytes[token] if 0 <= token < self.vocab.size else None
        if data is None:
            return -1
        with self._lock:
            return self.automaton.walk(d, data)

    def masks(self, completion_ids: list[int]) -> torch.Tensor:
        """[len, V] bool: the mask each generated token was sampled under (replayed from the ids)."""
        rows, d = [], self.start
        for k, tok in enumerate(completion_ids):
            m = self.mask(d, self.max_new_tokens - k)
            if not bool(m[tok]):
                raise ValueError(f"token {tok} at position {k} was not allowed by the grammar: "
                                 "the completion was not sampled under this constraint")
            rows.append(m)
            if tok == self.vocab.eos:
                break
            d = self.advance(d, tok)
        return torch.stack(rows) if rows else torch.zeros((0, self.vocab.size), dtype=torch.bool)


def schema_of(response_format: dict | None) -> dict | None:
    """The JSON schema of an OpenAI (``json_schema``) or llama.cpp (``json_object`` + schema) response_format."""
    if not response_format:
        return None
    schema = response_format.get("schema")
    if schema is None and isinstance(response_format.get("json_schema"), dict):
        schema = response_format["json_schema"].get("schema")
    return schema


class GrammarCache:
    """One vocabulary per tokenizer; one `SchemaConstraint` per schema, the `max_schemas` most recently
    used kept (the curator asks for one schema per run; an agent's action schema changes every turn
    with the admissible actions, and each constraint caches masks). A sample keeps its own constraint
    alive for the loss, whatever the cache drops."""

    def __init__(self, tokenizer, vocab_size: int, max_new_tokens: int, max_schemas: int = 64):
        self.vocab = Vocabulary(tokenizer, vocab_size)
        self.max_new_tokens = max_new_tokens
        self.max_schemas = max_schemas
        self._by_schema: OrderedDict[str, SchemaConstraint] = OrderedDict()

    def for_response_format(self, response_format: dict[str, Any] | None) -> SchemaConstraint | None:
        """The constraint of an OpenAI (`json_schema`) or llama.cpp (`json_object` + schema) request."""
        schema = schema_of(response_format)
        if schema is None:
            return None
        key = json.dumps(schema, sort_keys=True)
        if key in self._by_schema:
            self._by_schema.move_to_end(key)
        else:
            self._by_schema[key] = SchemaConstraint(schema, self.vocab, self.max_new_tokens)
            while len(self._by_schema) > self.max_schemas:
                self._by_schema.popitem(last=False)
        return self._by_schema[key]


class GrammarLogitsProcessor:
    """A transformers logits processor: row i of the batch follows constraints[i] (None: free)."""

    def __init__(self, constraints: list[SchemaConstraint | None], eos_id: int):
        self.constraints = constraints
        self.eos_id = eos_id
        self.states = [c.start if c is not None else -1 for c in constraints]
        self.done = [c is None for c in constraints]
        self.calls = 0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.calls:                                   # the previous step's token is the last column
            last = input_ids[:, -1].tolist()
            for i, c in enumerate(self.constraints):
                if self.done[i]:
                    continue
                if last[i] == self.eos_id:
                    self.done[i] = True
                else:
                    self.states[i] = c.advance(self.states[i], last[i])
        for i, c in enumerate(self.constraints):
            if not self.done[i]:
                allowed = c.mask(self.states[i], c.max_new_tokens - self.calls)
                allowed = allowed[:scores.shape[1]].to(scores.device)
                scores[i] = scores[i].masked_fill(~allowed, float("-inf"))
        self.calls += 1
        return scores
