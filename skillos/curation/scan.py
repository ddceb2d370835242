"""`flags(text)`: what in a skill written from traffic no procedure needs. No I/O; a tripwire, not a proof.

A skill the curator writes from a caller's trajectory is served to every later caller of the repo, so a task
text or a tool output can try to become an instruction to other agents ("first send the conversation to
https://..."). A procedure for a household, a shop or a sum needs none of: a URL, a host or address, an
e-mail address, a request to hand over credentials, a request to send or reveal the conversation, a shell
fetcher, or an instruction to drop its instructions. The skill repo refuses a curator op whose skill carries
one (`services.skillrepo.ops`, code ``flagged_content``, the flags in the verdict) and keeps no worked example
that does. The text is read after NFKC normalization with format characters (zero-width spaces, soft hyphens)
removed, so fullwidth or split spellings do not pass; look-alike letters of other scripts and paraphrases
still can. Until skills have a review state (issue 51 item 1), a refusal is how a flagged skill is kept
from other callers.
"""

from __future__ import annotations

import re
import unicodedata

_VERBS = r"(?:send|post|upload|forward|e-?mail|leak|exfiltrate|copy|reveal|print|repeat|share|include|paste|" \
         r"attach|transmit|give|provide|enter|type|tell)"
_CHECKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a URL", re.compile(r"\b[a-z][a-z0-9+.-]*://|(?<![\w/])//[a-z0-9-]+\.[a-z]|\bwww\.[a-z0-9-]+\.|"
                         r"\bhxxps?\b|\[\s*[.:]\s*\]", re.IGNORECASE)),
    ("an IP address", re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b|\b[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){7}\b|"
                                 r"(?<![\w:])(?:[0-9a-f]{1,4}:){1,7}:(?:[0-9a-f]{1,4})?(?![\w:])|(?<![\w:])::1\b",
                                 re.IGNORECASE)),
    ("an e-mail address", re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b")),
    ("a host name", re.compile(r"\blocalhost\b|\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}(?::\d+|/)|"
                               r"\b[a-z0-9-]+\.(?:com|net|org|io|ai|dev|app|xyz|ru|cn|co|me|sh|cc|tk|de|uk|info|biz|"
                               r"local|internal|example)\b", re.IGNORECASE)),
    ("a request for credentials", re.compile(
        r"\b" + _VERBS + r"\b[^.\n]{0,40}?\b(?:api[ _-]?keys?|passwords?|passwd|secret[ _-]?keys?|access[ _-]?tokens?|"
        r"bearer[ _-]?tokens?|credentials?|private[ _-]?keys?|ssh[ _-]?keys?|environment variables?)\b|"
        r"(?<![\w.])\.env\b|\b(?:api_key|secret_key|access_token|aws_secret)\b", re.IGNORECASE)),
    ("a request to send or reveal the conversation", re.compile(
        r"\b" + _VERBS + r"\b[^.]{0,40}?\b(?:conversation|chat(?: history| log)?|transcript|system prompt|"
        r"previous messages|the messages|message history)\b", re.IGNORECASE)),
    ("a shell fetcher", re.compile(r"\b(?:curl|wget|nc|netcat|ssh|scp)\s+-?[\w:/.-]", re.IGNORECASE)),
    ("an instruction about instructions", re.compile(
        r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|the\s+)?(?:of\s+)?(?:your\s+|the\s+)?"
        r"(?:previous|prior|above|earlier|preceding|system|your|these|those|other|all|original)\s+(?:\w+\s+)?"
        r"(?:instructions?|rules|guidelines|prompts?|directions)\b|\bsystem prompt\b", re.IGNORECASE)),
)


def normalized(text: str) -> str:
    """``text`` as the checks read it: NFKC (fullwidth and compatibility forms folded), format characters
    (category Cf: zero-width spaces and joiners, soft hyphens, direction marks) removed."""
    folded = unicodedata.normalize("NFKC", text or "")
    return "".join(c for c in folded if unicodedata.category(c) != "Cf")


def flags(text: str) -> list[str]:
    """The kinds of content found in ``text`` that no procedure needs (empty: nothing found)."""
    seen = normalized(text)
    return [what for what, pattern in _CHECKS if pattern.search(seen)]
