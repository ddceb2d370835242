"""A byte-level automaton for the curator's JSON schema, for constrained decoding in the trainer.

The curator service asks llama.cpp for grammar-constrained JSON (`response_format` with
`CURATOR_JSON_SCHEMA`); the in-process policy must obey the same schema, so this module compiles
the JSON-schema subset that schema uses (object with required properties in order, const, enum,
string with an anchored pattern or min/maxLength, array with min/maxItems, anyOf) into an NFA
over bytes, and walks it as a lazily built DFA. The JSON layout is fixed to `json.dumps`'s
(", " and ": ", no other whitespace): layout is not a decision worth sampling.

Each DFA state also knows `dist`, the fewest bytes that reach an accepting state: the token
masks use it to close the object before the token budget runs out.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

ALL = (1 << 256) - 1


def _bits(chars: bytes | range) -> int:
    m = 0
    for b in chars:
        m |= 1 << b
    return m


# unescaped string bytes (no '"', no '\', no control characters; UTF-8 bytes pass as they are)
STRING_CHAR = _bits(range(0x20, 0x100)) & ~_bits(b'"\\')
ESCAPED = _bits(b'"\\/bfnrt')

# AST nodes: ("lit", bytes) ("cls", bitmask) ("seq", nodes) ("alt", nodes) ("rep", node, min, max|None)


def lit(text: str | bytes) -> tuple:
    return ("lit", text.encode() if isinstance(text, str) else text)


def seq(*nodes) -> tuple:
    return ("seq", tuple(nodes))


def alt(*nodes) -> tuple:
    return ("alt", tuple(nodes))


def rep(node, lo: int, hi: int | None) -> tuple:
    return ("rep", node, lo, hi)


# --- JSON schema → AST ------------------------------------------------------------------------

_STRING_KEYS = {"type", "pattern", "minLength", "maxLength", "description"}


def schema_node(schema: dict[str, Any]) -> tuple:
    """The AST of every JSON text (in `json.dumps` layout) that the schema accepts.

    Raises ValueError on a keyword it does not implement, rather than silently allowing more
    (or less) than the backend's grammar would.
    """
    if "const" in schema:
        return lit(json.dumps(schema["const"], ensure_ascii=False))
    if "enum" in schema:
        return alt(*(lit(json.dumps(v, ensure_ascii=False)) for v in schema["enum"]))
    if "anyOf" in schema:
        return alt(*(schema_node(s) for s in schema["anyOf"]))
    kind = schema.get("type")
    if kind == "object":
        return _object(schema)
    if kind == "array":
        return _array(schema)
    if kind == "string":
        unknown = set(schema) - _STRING_KEYS
        if unknown:
            raise ValueError(f"string keywords {sorted(unknown)} are not supported")
        if "pattern" in schema:
            body = pattern_node(schema["pattern"])
        else:
            char = alt(("cls", STRING_CHAR), seq(lit("\\"), ("cls", ESCAPED)))
            body = rep(char, schema.get("minLength", 0), schema.get("maxLength"))
        return seq(lit('"'), body, lit('"'))
    if kind == "integer":
        return seq(rep(lit("-"), 0, 1), alt(lit("0"), seq(("cls", _bits(b"123456789")),
                                                          rep(("cls", _bits(b"0123456789")), 0, None))))
    if kind == "boolean":
        return alt(lit("true"), lit("false"))
    raise ValueError(f"schema {json.dumps(schema)[:200]} is not supported by the in-process grammar")


def _object(schema: dict[str, Any]) -> tuple:
    props = schema.get("properties", {})
    required = schema.get("required", [])
    if set(props) != set(required):
        raise ValueError("objects must list every property as required (optional ones are not supported)")
    parts: list = [lit("{")]
    for i, (key, sub) in enumerate(props.items()):
        parts.append(lit((", " if i else "") + json.dumps(key) + ": "))
        parts.append(schema_node(sub))
    parts.append(lit("}"))
    return seq(*parts)


def _array(schema: dict[str, Any]) -> tuple:
    item = schema_node(schema.get("items", {"type": "string"}))
    lo, hi = schema.get("minItems", 0), schema.get("maxItems")
    if hi == 0:
        return lit("[]")
    more = rep(seq(lit(", "), item), max(0, lo - 1), None if hi is None else hi - 1)
    body = seq(item, more)
    return seq(lit("["), body if lo >= 1 else rep(body, 0, 1), lit("]"))


# --- anchored regex subset → AST (for string patterns) -------------------------------------------

def pattern_node(pattern: str) -> tuple:
    """`^...$` with literals, [classes], (groups), |, and the quantifiers * + ? {m} {m,} {m,n}."""
    if not (pattern.startswith("^") and pattern.endswith("$")):
        raise ValueError(f"pattern {pattern!r} must be anchored with ^ and $")
    parser = _Regex(pattern[1:-1])
    node = parser.alternation()
    if parser.i != len(parser.src):
        raise ValueError(f"pattern {pattern!r}: unexpected {parser.src[parser.i]!r}")
    return node


class _Regex:
    def __init__(self, src: str):
        self.src, self.i = src, 0

    def _peek(self) -> str:
        return self.src[self.i] if self.i < len(self.src) else ""

    def alternation(self) -> tuple:
        branches = [self.concat()]
        while self._peek() == "|":
            self.i += 1
            branches.append(self.concat())
        return branches[0] if len(branches) == 1 else alt(*branches)

    def concat(self) -> tuple:
        items = []
        while self._peek() not in ("", "|", ")"):
            items.append(self.quantified(self.atom()))
        return seq(*items)

    def atom(self) -> tuple:
        c = self.src[self.i]
        self.i += 1
        if c == "(":
            if self.src.startswith("?:", self.i):
                self.i += 2
            node = self.alternation()
            if self._peek() != ")":
                raise ValueError(f"unclosed group in {self.src!r}")
            self.i += 1
            return node
        if c == "[":
            return ("cls", self._class() & STRING_CHAR)
        if c == "\\":
            c = self.src[self.i]
            self.i += 1
            shorthand = {"d": _bits(b"0123456789"), "w": _bits(b"abcdefghijklmnopqrstuvwxyz"
                                                             b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")}
            if c in shorthand:
                return ("cls", shorthand[c])
        elif c == ".":
            return ("cls", STRING_CHAR)
        if c in '"\\' or ord(c) < 0x20:
            raise ValueError(f"pattern character {c!r} would need JSON escaping")
        return lit(c)

    def _class(self) -> int:
        negate = self._peek() == "^"
        self.i += negate
        m = 0
        while self._peek() != "]":
            if not self._peek():
                raise ValueError(f"unclosed [ in {self.src!r}")
            lo = self.src[self.i]
            self.i += 1
            if self._peek() == "-" and self.src[self.i + 1:self.i + 2] not in ("]", ""):
                hi = self.src[self.i + 1]
                self.i += 2
                m |= _bits(range(ord(lo), ord(hi) + 1))
            else:
                m |= _bits(lo.encode())
        self.i += 1
        return (ALL & ~m) if negate else m

    def quantified(self, node: tuple) -> tuple:
        c = self._peek()
        if c in ("*", "+", "?"):
            self.i += 1
            return rep(node, 1 if c == "+" else 0, 1 if c == "?" else None)
        if c == "{":
            end = self.src.index("}", self.i)
            inner = self.src[self.i + 1:end]
            self.i = end + 1
            if "," in inner:
                lo_s, hi_s = inner.split(",", 1)
                lo, hi = int(lo_s), (int(hi_s) if hi_s else None)
            else:
                lo = hi = int(inner)
            return rep(node, lo, hi)
        return node


# --- NFA and lazy DFA ----------------------------------------------------------------------------

class Automaton:
    """Byte DFA of an AST, built on demand. States are ints; -1 is dead."""

    def __init__(self, node: tuple):
        self._eps: list[list[int]] = []
        self._edges: list[list[tuple[int, int]]] = []
        start = self._new()
        self._accept = self._build(node, start)
        self._nfa_dist = self._distances()
        self._sets: list[frozenset[int]] = []
        self._index: dict[frozenset[int], int] = {}
        self._trans: list[dict[int, int]] = []
        self.dist: list[int] = []
        self.start = self._intern(self._closure({start}))

    def _new(self) -> int:
        self._eps.append([])
        self._edges.append([])
        return len(self._eps) - 1

    def _build(self, node: tuple, s: int) -> int:
        kind = node[0]
        if kind == "lit":
            for b in node[1]:
                t = self._new()
                self._edges[s].append((1 << b, t))
                s = t
            return s
        if kind == "cls":
            t = self._new()
            self._edges[s].append((node[1], t))
            return t
        if kind == "seq":
            for sub in node[1]:
                s = self._build(sub, s)
            return s
        if kind == "alt":
            end = self._new()
            for sub in node[1]:
                self._eps[self._build(sub, s)].append(end)
            return end
        _, sub, lo, hi = node
        for _ in range(lo):
            s = self._build(sub, s)
        if hi is None:                                  # s -> sub -> back to s
            self._eps[self._build(sub, s)].append(s)
            return s
        end = self._new()
        self._eps[s].append(end)
        for _ in range(hi - lo):
            s = self._build(sub, s)
            self._eps[s].append(end)
        return end

    def _distances(self) -> list[int]:
        """Fewest bytes from each NFA state to the accepting one (0-1 BFS on reversed edges)."""
        rev: list[list[tuple[int, int]]] = [[] for _ in self._eps]
        for u in range(len(self._eps)):
            for v in self._eps[u]:
                rev[v].append((u, 0))
            for _, v in self._edges[u]:
                rev[v].append((u, 1))
        inf = 1 << 30
        dist = [inf] * len(self._eps)
        dist[self._accept] = 0
        queue = deque([self._accept])
        while queue:
            v = queue.popleft()
            for u, w in rev[v]:
                if dist[v] + w < dist[u]:
                    dist[u] = dist[v] + w
                    (queue.appendleft if w == 0 else queue.append)(u)
        return dist

    def _closure(self, states: set[int]) -> frozenset[int]:
        stack, seen = list(states), set(states)
        while stack:
            for t in self._eps[stack.pop()]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)

    def _intern(self, states: frozenset[int]) -> int:
        d = self._index.get(states)
        if d is None:
            d = len(self._sets)
            self._index[states] = d
            self._sets.append(states)
            self._trans.append({})
            self.dist.append(min(self._nfa_dist[s] for s in states))
        return d

    def step(self, d: int, byte: int) -> int:
        nxt = self._trans[d].get(byte)
        if nxt is None:
            bit = 1 << byte
            targets = {t for s in self._sets[d] for m, t in self._edges[s] if m & bit}
            nxt = self._intern(self._closure(targets)) if targets else -1
            self._trans[d][byte] = nxt
        return nxt

    def walk(self, d: int, data: bytes) -> int:
        for b in data:
            if d < 0:
                break
            d = self.step(d, b)
        return d

    def accepting(self, d: int) -> bool:
        return self.dist[d] == 0         # 0 bytes away: the accepting state is in the closure

    def matches(self, data: bytes) -> bool:
        d = self.walk(self.start, data)
        return d >= 0 and self.accepting(d)
