"""Credentials left at the value a template ships with: refused at start, not served with.

`k8s/base/kustomization.yaml` ships ``CHANGE-ME`` for the API token, the token list and the database password
(the Helm examples for an external database and LLM, for their URLs and key): a deployment applied without
replacing them would run with credentials anyone who has read the repository knows. A process that reads
one (`skillos.auth.Authenticator`, `skillos.settings.ApiTokenSettings`, `skillos.db.make_engine`: tokens and
database passwords) stops with a message naming the setting. Redis URLs and LLM keys are not checked.
"""

from __future__ import annotations

PLACEHOLDERS = frozenset({"change-me", "changeme", "change_me"})


def is_placeholder(value: str | None) -> bool:
    return bool(value) and value.strip().lower() in PLACEHOLDERS


def refuse_placeholder(value: str | None, setting: str) -> None:
    """Raise ValueError when ``value`` is a shipped placeholder."""
    if is_placeholder(value):
        raise ValueError(f"{setting} is still the placeholder {value!r} of the deployment template: set a "
                         "secret of your own (for example `openssl rand -hex 32`)")
