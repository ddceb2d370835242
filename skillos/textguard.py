"""Checks of untrusted values before they reach what cannot take them.

PostgreSQL text refuses NUL characters (``DataError``), UTF-8 encoders and pydantic's JSON serializer
refuse lone surrogates (``"\\ud800"`` in JSON decodes to one), and recursive code (``json``, PyYAML's
emitter, pydantic) raises ``RecursionError`` on values nested a few hundred levels deep. The service
door (`skillos.service`) runs these checks on every JSON request body; the skill format
(`skillos.skills`) and the skill repo's ops run them on what they parse themselves.

Plain code without I/O; each check returns a `Problem` (or None) for the caller to raise as it likes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

# JSON a service takes: deeper than this is refused (requests of every part nest a dozen levels at most;
# json, pydantic and PyYAML's emitter recurse and fail some hundreds of levels down)
MAX_JSON_DEPTH = 64


@dataclass
class Problem:
    code: str      # "invalid_character", "too_deep", "invalid_value"
    message: str


def bad_char(s: str) -> str | None:
    """What is wrong with ``s`` (a NUL character, a lone surrogate) or None."""
    if "\x00" in s:
        return "a NUL character (U+0000)"
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as e:
            return f"a lone surrogate (U+{ord(s[e.start]):04X})"
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD: what a record of untrusted text (a model's completion cut
    inside a character, decoded from a ``\\ud83c`` escape) must become before UTF-8 or pydantic take it."""
    return text if text.isascii() or not _SURROGATE.search(text) else _SURROGATE.sub("\ufffd", text)


def decimal(text: str, maximum: int) -> int | None:
    """``text`` as a whole number from 0 to ``maximum``, or None. Only ASCII digits: '²' is a digit to
    ``str.isdigit`` and ``int('²')`` raises; the length is checked before ``int()``, which refuses
    strings past 4,300 digits."""
    digits = text.lstrip("0")
    if not (text.isascii() and text.isdigit()) or len(digits) > len(str(maximum)):
        return None
    n = int(digits or 0)
    return n if n <= maximum else None


def _where(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "the top level"


def check_value(value: Any, *, max_depth: int, strings: bool = True, json_only: bool = False,
                what: str = "the value") -> Problem | None:
    """Walk ``value`` (dicts and lists, iteratively): nesting deeper than ``max_depth`` (the top container is
    level 1), and with ``strings`` a NUL or lone surrogate in any string or key; with ``json_only`` anything
    that is not JSON (str, int, float, bool, None, list, dict with str keys)."""
    stack: list[tuple[Any, int, tuple]] = [(value, 1, ())]
    while stack:
        v, depth, path = stack.pop()
        if isinstance(v, dict):
            items = v.items()
        elif isinstance(v, list):
            items = enumerate(v)
        else:
            if strings and isinstance(v, str) and (bad := bad_char(v)):
                return Problem("invalid_character", f"{what} holds {bad} at {_where(path)}")
            if json_only and not (v is None or isinstance(v, (str, int, float, bool))):
                return Problem("invalid_value", f"{what} holds a {type(v).__name__} at {_where(path)}: "
                                                "only strings, numbers, booleans, null, lists and mappings")
            if json_only and isinstance(v, float) and not math.isfinite(v):
                return Problem("invalid_value", f"{what} holds {v} at {_where(path)}: not a JSON number")
            continue
        if depth > max_depth:
            return Problem("too_deep", f"{what} is nested deeper than {max_depth} levels (at {_where(path)})")
        for k, x in items:
            if isinstance(k, str):
                if strings and (bad := bad_char(k)):
                    return Problem("invalid_character", f"{what} holds {bad} in a key at {_where(path)}")
            elif json_only and isinstance(v, dict) and not (k is None or isinstance(k, (int, float))):
                return Problem("invalid_value", f"{what} has a {type(k).__name__} key at {_where(path)}: "
                                                "keys must be strings (or numbers)")
            if isinstance(x, (dict, list)):
                stack.append((x, depth + 1, (*path, k)))
            elif isinstance(x, str):
                if strings and (bad := bad_char(x)):
                    return Problem("invalid_character", f"{what} holds {bad} at {_where((*path, k))}")
            elif json_only and isinstance(x, float) and not math.isfinite(x):
                return Problem("invalid_value", f"{what} holds {x} at {_where((*path, k))}: not a JSON number")
            elif json_only and not (x is None or isinstance(x, (int, float, bool))):
                return Problem("invalid_value", f"{what} holds a {type(x).__name__} at {_where((*path, k))}: "
                                                "only strings, numbers, booleans, null, lists and mappings")
    return None


# JSON escapes: a valid surrogate pair, and one that decodes to NUL or to half a pair (once pairs are gone)
_PAIRED_ESCAPES = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_BAD_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")
_BRACKET_STEPS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # +1 / -1 as signed bytes
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_SLICE = 1 << 16
_PEEL = 4


def as_utf8_json(body: bytes) -> bytes | None:
    """``body`` as UTF-8 (``json.loads`` also reads UTF-16 and UTF-32: so do we), or None when it cannot be
    JSON text (undecodable, or a raw NUL byte, which JSON never holds)."""
    encoding = json.detect_encoding(body)
    if encoding != "utf-8":
        try:
            body = body.decode(encoding).encode("utf-8")
        except UnicodeError:
            return None
    return None if b"\x00" in body else body


def check_json_body(body: bytes, max_depth: int = MAX_JSON_DEPTH, *, declared: bool = True) -> Problem | None:
    """Nesting deeper than ``max_depth``, or a NUL / lone surrogate in a string, of a JSON document, mostly
    without building it (the service door runs this on every JSON request body).

    A NUL or a lone surrogate can only come from a ``\\u`` escape (JSON refuses raw control characters,
    UTF-8 refuses raw surrogates): only when an escape of the kind is there (escaped backslashes and
    valid pairs aside) is the document parsed and its strings walked. Depth is the running count of
    brackets outside strings (strings cut out with ``split``, the count in C by ``accumulate``), looked
    at only when there are more brackets than ``max_depth``; at most a pass over the document per few
    MB/s of C, about what parsing it costs. Not ``declared`` as JSON (no content type): looked at only
    when it starts like a JSON object, array or string (an archive sent without a type is not JSON). A document that is not JSON passes: the
    route that parses it answers."""
    if (body := as_utf8_json(body)) is None or (not declared and body.lstrip()[:1] not in (b"{", b"[", b'"')):
        return None
    escapes = body.replace(b"\\\\", b"") if b"\\" in body else body
    if b"\\u" in escapes and _BAD_ESCAPE.search(_PAIRED_ESCAPES.sub(b"", escapes)):
        return _parse_and_check(body, max_depth)
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return None
    outside = b"".join(escapes.replace(b'\\"', b"").split(b'"')[::2])
    steps = outside.translate(_BRACKET_STEPS, _NOT_BRACKETS)
    # a few passes that drop the innermost (empty) pairs: each lowers every container's height by one, and
    # wide shallow documents (a list of many small objects) shrink to almost nothing
    peeled = 0
    while peeled < _PEEL and steps:
        steps = steps.replace(b"\x01\xff", b"")
        peeled += 1
    if not steps:
        return None
    view, level, limit = memoryview(steps).cast("b"), 0, max_depth - peeled
    for i in range(0, len(steps), _SLICE):
        j = i + _SLICE
        opened = steps.count(1, i, j)
        if level + opened > limit and max(accumulate(view[i:j], initial=level)) > limit:
            return Problem("too_deep", f"the JSON body is nested deeper than {max_depth} levels")
        level += opened - steps.count(255, i, j)
    return None


def _parse_and_check(body: bytes, max_depth: int) -> Problem | None:
    try:
        data = json.loads(body)
    except RecursionError:
        return Problem("too_deep", f"the JSON body is nested deeper than {max_depth} levels")
    except ValueError:
        return None
    return check_value(data, max_depth=max_depth, what="the JSON body")
