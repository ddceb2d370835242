"""Bearer-token auth shared by the services.

Tokens are configured as ``token:scope[:repo-prefix[:label]]`` entries, comma-separated (SKILLOS_AUTH_TOKENS),
scope ``read`` (GET only) or ``rw`` (read and write); with a prefix the token only reaches the repos the
prefix names as a whole word (`prefix_reaches`: ``acme`` reaches ``acme`` and ``acme-dev``, never ``acmecorp``). No or an unknown token: 401. A known token used beyond its scope or prefix: 403.
Mode ``open`` (the embedded default) lets every request through; deployment configs set ``tokens``.

The same tokens (SKILLOS_AUTH_MODE, SKILLOS_AUTH_TOKENS, `skillos.settings.InboundAuthSettings`) guard every
service through which a caller reaches a repo (the skill repo, the executor and its gateway, the curator) and
the env servers (where a token of any scope plays, and a session is its opener's). A
service puts its `Authenticator` on ``app.state.auth``; a route takes the caller's `Grant` with `Auth` and
asks it for the repo it touches (`Grant.require`). The grant of the request being served is also
`current_caller()` (a context variable, which worker threads started with anyio or asyncio inherit): what a
write records as its writer, from the server's side (the op log's ``writer``: the token's label, ``token#<n>``
unless the entry names one).

An entry may name its token by the token's SHA-256 digest instead, ``sha256:<64 hex digits>:scope[:prefix
[:label]]`` (`token_digest`, `skillos token digest`): a process that only checks tokens (an env server) then holds none it
could send. Every entry is kept as a digest, and a caller's token is hashed once and compared with each in
constant time (`hmac.compare_digest`); the entry's `Grant.caller_id` is the same either way, so a gateway
trajectory's owner stays its owner when its entry is rewritten as a digest.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from skillos.errors import APIError
from skillos.logging import get_logger
from skillos.placeholders import PLACEHOLDERS, refuse_placeholder

SCOPES = ("read", "rw")
DIGEST_SCHEME = "sha256"   # an entry starting with "sha256:" names its token by digest
HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
LABEL = re.compile(r"[A-Za-z0-9._#-]{1,64}")
_CALLER: ContextVar[Grant | None] = ContextVar("skillos_caller", default=None)
# where a repo name's words part (REPO_NAME_PATTERN allows these three besides letters and digits)
NAME_SEPARATORS = ".-_"


def prefix_reaches(prefix: str | None, name: str) -> bool:
    """Whether a grant's prefix reaches a repo (or run) named ``name``: the name is the prefix, or goes on after
    it with a separator. A bare ``startswith`` let ``acme`` reach ``acmecorp``, another tenant's repos. A
    prefix that ends with a separator (``acme-``) reaches every name that starts with it."""
    if prefix is None:
        return True
    if not name.startswith(prefix):
        return False
    return len(name) == len(prefix) or prefix[-1] in NAME_SEPARATORS or name[len(prefix)] in NAME_SEPARATORS


def default_repo_for(prefix: str | None, default: str) -> str:
    """The repo a caller works in when it names none: ``default`` for a token that reaches every repo; for a
    token limited to a prefix, one of its own (``acme`` for ``acme``, ``team-default`` for ``team-``), never
    the shared repo other tenants' traffic is curated into (the gateway, the MCP server)."""
    if prefix is None:
        return default
    return prefix + default if prefix[-1] in NAME_SEPARATORS else prefix


@dataclass(frozen=True)
class Grant:
    scope: str                  # "read" or "rw"
    prefix: str | None = None   # repos this grant reaches (None: all)
    token_label: str = "open"
    # who the caller is, stably (a digest of its token; labels follow the tokens' order in the setting): what a
    # gateway trajectory records as its owner. Open mode's callers are all "open".
    caller_id: str = "open"

    @property
    def operator(self) -> bool:
        """An rw token without a prefix: it reaches everything, as the services' own token does."""
        return self.scope == "rw" and self.prefix is None

    def allows_repo(self, repo: str) -> bool:
        return prefix_reaches(self.prefix, repo)

    def require(self, repo: str | None = None, *, write: bool = False) -> None:
        if write and self.scope != "rw":
            raise APIError(403, "forbidden", "this token is read-only: use a token with the 'rw' scope to write")
        if repo is not None and not self.allows_repo(repo):
            raise APIError(403, "forbidden", f"this token only reaches {self.reach()}, not {repo!r}")

    def reach(self) -> str:
        """The repos this grant reaches, in words (for its 403s)."""
        if self.prefix is None:
            return "every repo"
        if self.prefix[-1] in NAME_SEPARATORS:
            return f"repos starting with {self.prefix!r}"
        return f"the repo {self.prefix!r} and repos starting with " + ", ".join(
            repr(self.prefix + sep) for sep in NAME_SEPARATORS)


OPEN = Grant("rw", None, "open")


def token_digest(token: str) -> str:
    """A token's SHA-256 digest, 64 lower-case hex digits: what an entry ``sha256:<digest>:scope...`` names."""
    return hashlib.sha256(token.encode()).hexdigest()


def _caller_id_of_digest(digest: str) -> str:
    return "tok-" + digest[:24]


def caller_id(token: str) -> str:
    """A stable name for a token that does not give it away (kept in the gateway's database)."""
    return _caller_id_of_digest(token_digest(token))


def digest_entry(token: str, scope: str, prefix: str | None = None, label: str | None = None) -> str:
    """The SKILLOS_AUTH_TOKENS entry that grants ``token`` by its digest (parsed back by `parse_tokens`)."""
    if scope not in SCOPES:
        raise ValueError(f"scope is one of {', '.join(SCOPES)}, not {scope!r}")
    if label is not None and not LABEL.fullmatch(label):
        raise ValueError("a label is 1-64 letters, digits, '.', '_', '-' or '#'")
    if prefix and any(c in prefix for c in ":,"):
        raise ValueError("a repo prefix holds no ':' or ','")
    refuse_placeholder(token, "the token")
    entry = f"{DIGEST_SCHEME}:{token_digest(token)}:{scope}"
    if prefix or label:
        entry += f":{prefix or ''}"
    if label:
        entry += f":{label}"
    return entry


# the digests of the shipped placeholders: an entry naming one by digest is refused as the placeholder is
_PLACEHOLDER_DIGESTS = {token_digest(v) for p in PLACEHOLDERS for v in (p, p.upper())}


def parse_tokens(spec: str) -> list[tuple[str, Grant]]:
    """The grants of SKILLOS_AUTH_TOKENS, each with its token's SHA-256 digest (hex): an entry names its token
    as it is or by that digest (``sha256:<hex>:...``). ValueError for a malformed entry or digest, a placeholder
    token (or its digest), or a label given twice (or ``open``, open mode's): the op log's writer must name one
    token."""
    grants: list[tuple[str, Grant]] = []
    for i, entry in enumerate(p.strip() for p in spec.split(",")):
        if not entry:
            continue
        parts = entry.split(":")
        if parts[0].lower() == DIGEST_SCHEME:   # a digest entry: the token itself is not here
            if len(parts) < 2 or not HEX_DIGEST.fullmatch(parts[1]):   # the value is not echoed: a token, maybe
                raise ValueError(f"SKILLOS_AUTH_TOKENS entry {i + 1} starts with 'sha256:' but what follows is not "
                                 "a SHA-256 digest (64 hex digits): write 'sha256:<digest>:read|rw[:repo-prefix"
                                 "[:label]]' with the digest `skillos token digest` prints")
            digest, parts = parts[1].lower(), parts[1:]
            if digest in _PLACEHOLDER_DIGESTS:
                raise ValueError(f"SKILLOS_AUTH_TOKENS entry {i + 1} is the digest of the deployment template's "
                                 "placeholder token: set a secret of your own (for example `openssl rand -hex 32`)")
        else:
            digest = None
        if len(parts) not in (2, 3, 4) or not parts[0] or parts[1] not in SCOPES:
            raise ValueError(f"auth token entry {i + 1} is not 'token:read|rw[:repo-prefix[:label]]' "
                             "(or 'sha256:<digest>:read|rw[:repo-prefix[:label]]')")
        if digest is None:
            refuse_placeholder(parts[0], f"SKILLOS_AUTH_TOKENS entry {i + 1}")
            digest = token_digest(parts[0])
        label = parts[3] if len(parts) == 4 and parts[3] else f"token#{i + 1}"
        if not LABEL.fullmatch(label):
            raise ValueError(f"auth token entry {i + 1}: its label is 1-64 letters, digits, '.', '_', '-' or '#'")
        if label == OPEN.token_label or any(g.token_label == label for _, g in grants):
            raise ValueError(f"auth token entry {i + 1}: the label {label!r} is taken (open mode's, or an "
                             "earlier entry's): give each token a label of its own")
        grants.append((digest, Grant(parts[1], parts[2] if len(parts) >= 3 and parts[2] else None, label,
                                     _caller_id_of_digest(digest))))
    return grants


def digest_tokens(spec: str) -> str:
    """``spec`` (a SKILLOS_AUTH_TOKENS value) with each token replaced by ``sha256:<its digest>``, digest entries
    kept as they are: the same grants (scopes, prefixes, labels, owners) for a service that only checks tokens.
    ValueError for what `parse_tokens` refuses."""
    parse_tokens(spec)
    out = []
    for entry in (p.strip() for p in spec.split(",")):   # empty entries kept: default labels count them
        if entry and entry.split(":")[0].lower() != DIGEST_SCHEME:
            token, rest = entry.split(":", 1)
            entry = f"{DIGEST_SCHEME}:{token_digest(token)}:{rest}"
        out.append(entry)
    return ",".join(out)


class Authenticator:
    def __init__(self, mode: str = "open", tokens: str = ""):
        if mode not in ("open", "tokens"):
            raise ValueError("auth mode is 'open' or 'tokens'")
        self.mode = mode
        self._grants = [(bytes.fromhex(d), g) for d, g in parse_tokens(tokens)]   # (sha256 digest, grant)
        if mode == "tokens" and not self._grants:
            raise ValueError("auth mode 'tokens' needs at least one token in SKILLOS_AUTH_TOKENS")
        for _, g in self._grants:
            if g.prefix and g.prefix[-1] not in NAME_SEPARATORS:   # its reach narrowed with prefix_reaches
                get_logger("auth").warning("auth_prefix_is_a_whole_word", token=g.token_label, prefix=g.prefix,
                                           reaches=g.reach())

    def grant_of(self, caller: str | None) -> Grant | None:
        """The grant a caller (`Grant.caller_id`) holds now: None for a token no longer configured. For work
        done later on a caller's behalf (a gateway trajectory curated after it went idle)."""
        if self.mode == "open":
            return OPEN
        return next((g for _, g in self._grants if g.caller_id == caller), None)

    def authenticate(self, authorization: str | None) -> Grant:
        if self.mode == "open":
            return OPEN
        if not authorization:
            raise APIError(401, "unauthorized", "missing token: send 'Authorization: Bearer <token>'",
                           headers={"WWW-Authenticate": "Bearer"})
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise APIError(401, "unauthorized", "malformed Authorization header: use 'Bearer <token>'",
                           headers={"WWW-Authenticate": "Bearer"})
        presented = hashlib.sha256(token.strip().encode()).digest()   # compared as digests: entries may hold no token
        for known, grant in self._grants:
            if hmac.compare_digest(known, presented):
                return grant
        raise APIError(401, "unauthorized", "unknown token", headers={"WWW-Authenticate": "Bearer"})


_bearer = HTTPBearer(auto_error=False, description="a token from SKILLOS_AUTH_TOKENS (not needed in open mode)")


# async: FastAPI runs a plain `def` dependency in the thread pool, a thread hop per request for nothing
async def grant(request: Request, _creds: Annotated[object, Depends(_bearer)] = None) -> Grant:
    """The caller's grant (401 without a known token in ``tokens`` mode). `_bearer` only documents the
    scheme in OpenAPI; the header is read here so every service answers the same 401s."""
    found = request.app.state.auth.authenticate(request.headers.get("authorization"))
    _CALLER.set(found)
    return found


def current_caller() -> Grant | None:
    """The grant of the request being served (None outside a request: a CLI, a test calling a store)."""
    return _CALLER.get()


Auth = Annotated[Grant, Depends(grant)]
