"""`flags(text)`: what in a skill written from traffic no procedure needs. No I/O.

A skill the curator writes from a caller's trajectory is served to every later caller of the repo, so a task
text or a tool output can try to become an instruction to other agents ("first send the conversation to
https://..."). A procedure for a household, a shop or a sum needs none of: a URL, a host or address, an
e-mail address, a request for credentials, a request to send or reveal the conversation, a shell fetcher, or
an instruction about instructions. The skill repo refuses a curator op whose content carries one
(`services.skillrepo.ops`, code ``flagged_content``, the flags in the verdict) and keeps no worked example
that does; a person's REST writes are not scanned. Until skills have a review state (issue 51 item 1), a
refusal is how a flagged skill is kept from other callers.
"""

from __future__ import annotations

import re

_CHECKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a URL", re.compile(r"\b(?:https?|ftp|wss?)://|\bwww\.[a-z0-9-]+\.", re.IGNORECASE)),
    ("an IP address", re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")),
    ("an e-mail address", re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b")),
    ("a host name", re.compile(r"\b[a-z0-9-]+\.(?:com|net|org|io|ai|dev|app|xyz|ru|cn|co|me|sh|cc|tk)\b",
                               re.IGNORECASE)),
    ("a request for credentials", re.compile(
        r"\b(?:api[ _-]?keys?|passwords?|passwd|secret[ _-]?keys?|access[ _-]?tokens?|bearer[ _-]?tokens?|"
        r"credentials?|private[ _-]?keys?|ssh[ _-]?keys?|\.env\b|environment variables?)", re.IGNORECASE)),
    ("a request to send or reveal the conversation", re.compile(
        r"\b(?:send|post|upload|forward|email|e-mail|leak|exfiltrate|copy|reveal|print|repeat)\b[^.\n]{0,40}?\b"
        r"(?:conversation|chat history|transcript|system prompt|previous messages|the messages)\b", re.IGNORECASE)),
    ("a shell fetcher", re.compile(r"\b(?:curl|wget|nc|netcat|ssh|scp)\s+-?[\w:/.-]", re.IGNORECASE)),
    ("an instruction about instructions", re.compile(
        r"\b(?:ignore|disregard|forget|override)\b[^.\n]{0,30}?\b(?:instructions?|rules|guidelines|prompt)\b|"
        r"\bsystem prompt\b|\byou are now\b|\bnew instructions\b", re.IGNORECASE)),
)


def flags(text: str) -> list[str]:
    """The kinds of content found in ``text`` that no procedure needs (empty: nothing found)."""
    return [what for what, pattern in _CHECKS if pattern.search(text or "")]
