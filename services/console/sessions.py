"""Logins of the console: server-side sessions behind an httpOnly cookie, and their CSRF tokens.

The browser holds a random session id only (``HttpOnly``, ``SameSite=Lax``, ``Secure`` behind HTTPS);
the token stays in the console's memory, so page scripts (and anything injected into a page) cannot
read it. Every form that writes carries the session's CSRF token, checked in constant time. Sessions
live in one process: run a single console replica (or pin users to one).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field

COOKIE = "skillos_console"


def session_cookie(value: str, ttl_s: int, secure: bool) -> str:
    """The Set-Cookie value of a session: httpOnly, SameSite=Lax (links from elsewhere keep the login,
    cross-site POSTs do not carry it), Secure behind HTTPS."""
    parts = [f"{COOKIE}={value}", "Path=/", "HttpOnly", "SameSite=Lax", f"Max-Age={ttl_s}"]
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


@dataclass
class Session:
    id: str
    token: str | None          # None: the skill repo is open (no token needed)
    mode: str                  # the skill repo's auth mode: open | tokens
    scope: str                 # read | rw
    prefix: str | None         # repos the token reaches (None: all)
    label: str | None = None   # the token's label as the skill repo knows it (None: a repo that does not say)
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    expires: float = 0.0
    checked: float = 0.0       # when the token was last confirmed with the skill repo

    @property
    def can_write(self) -> bool:
        return self.scope == "rw"

    @property
    def operator(self) -> bool:
        """An rw token without a repo prefix (an operator's): a reviewer of every repo."""
        return self.scope == "rw" and self.prefix is None

    def may_review(self, reviewers: list[str] | None) -> bool:
        """Whether the skill repo would let this token decide proposals and change skill states of a repo whose
        policy names ``reviewers``: to show the forms or not. The repo still judges every POST (a label the
        repo does not say is given the benefit of the doubt: the form shows, the repo answers)."""
        if not self.can_write:
            return False
        return self.operator or self.label is None or self.label in (reviewers or [])

    def csrf_ok(self, value: str | None) -> bool:
        return bool(value) and hmac.compare_digest(self.csrf.encode(), str(value).encode())


class SessionStore:
    def __init__(self, ttl_s: float, max_sessions: int = 20_000):
        self.ttl_s, self.max_sessions = ttl_s, max_sessions
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def create(self, token: str | None, mode: str, scope: str, prefix: str | None,
               label: str | None = None) -> Session:
        now = time.monotonic()
        s = Session(id=secrets.token_urlsafe(32), token=token, mode=mode, scope=scope, prefix=prefix, label=label,
                    expires=now + self.ttl_s, checked=now)
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                self._expire(now)
                if len(self._sessions) >= self.max_sessions:  # still full: the oldest go
                    for sid in sorted(self._sessions, key=lambda k: self._sessions[k].expires)[:len(self._sessions) // 10]:
                        del self._sessions[sid]
            self._sessions[s.id] = s
        return s

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        now = time.monotonic()
        with self._lock:
            s = self._sessions.get(sid)
            if s is None:
                return None
            if s.expires < now:
                del self._sessions[sid]
                return None
            s.expires = now + self.ttl_s   # sliding expiry
            return s

    def drop(self, sid: str | None) -> None:
        with self._lock:
            self._sessions.pop(sid or "", None)

    def _expire(self, now: float) -> None:
        for sid in [k for k, s in self._sessions.items() if s.expires < now]:
            del self._sessions[sid]

    def __len__(self) -> int:
        return len(self._sessions)
