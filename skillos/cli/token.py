"""`skillos token`: SKILLOS_AUTH_TOKENS entries that name a token by its SHA-256 digest (`skillos.auth`).

A service that only checks tokens (an env server) can be given a list of digests: it lets the same callers in
and holds no token it could send. The token is read from stdin when not given (kept out of the shell's
history and the process list). The auth module (FastAPI) is imported when a command runs.
"""

from __future__ import annotations

import sys

import typer

from skillos.cli.common import fail

token_app = typer.Typer(no_args_is_help=True,
                        help="Token lists that hold no usable token: entries by SHA-256 digest.")


def _read(value: str | None, what: str) -> str:
    """``value``, or (omitted or '-') one line of stdin, or a hidden prompt on a terminal."""
    if value not in (None, "-"):
        return value
    if sys.stdin.isatty():
        return typer.prompt(what, hide_input=True)
    return sys.stdin.readline().strip()


@token_app.command("digest")
def digest(
    token: str = typer.Argument(None, help="The token; omitted or '-': read from stdin."),
    scope: str = typer.Option(None, "--scope", help="read or rw: print a whole SKILLOS_AUTH_TOKENS entry."),
    prefix: str = typer.Option(None, "--prefix", help="The entry's repo prefix (with --scope)."),
    label: str = typer.Option(None, "--label", help="The entry's label, the op log's writer (with --scope)."),
) -> None:
    """Print sha256:<digest> of a token, or with --scope the entry 'sha256:<digest>:scope[:prefix[:label]]'."""
    # deferred: skillos.auth imports FastAPI, which `skillos --help` need not load
    from skillos.auth import digest_entry, token_digest
    from skillos.placeholders import is_placeholder

    value = _read(token, "token").strip()
    if not value:
        fail("no token given (as an argument or on stdin)")
    if (prefix or label) and not scope:
        fail("--prefix and --label are parts of an entry: give --scope too")
    if scope is None:
        if is_placeholder(value):
            fail("that is the deployment template's placeholder token: set a secret of your own")
        typer.echo(f"sha256:{token_digest(value)}")
        return
    try:
        typer.echo(digest_entry(value, scope, prefix, label))
    except ValueError as e:
        fail(str(e))


@token_app.command("digest-list")
def digest_list(
    tokens: str = typer.Argument(None, help="A SKILLOS_AUTH_TOKENS value; omitted or '-': read from stdin."),
) -> None:
    """Print a SKILLOS_AUTH_TOKENS value with each token replaced by its digest (scopes, prefixes and labels
    kept, digest entries as they are): the list for a service that only checks tokens, e.g.
    `printenv SKILLOS_AUTH_TOKENS | skillos token digest-list`."""
    # deferred: skillos.auth imports FastAPI, which `skillos --help` need not load
    from skillos.auth import digest_tokens

    try:
        typer.echo(digest_tokens(_read(tokens, "SKILLOS_AUTH_TOKENS")))
    except ValueError as e:
        fail(str(e))
