"""The `skillos` command. Each part registers its own commands from its `cli.py`.

Heavy imports (torch, alfworld, SQLAlchemy models) stay inside the command functions so that
`skillos --help` and thin client commands start fast.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

from skillos.cli.token import token_app

_app = typer.Typer(no_args_is_help=True, add_completion=False,
                   help="SkillOS: skill repo, environments, executor, curator and GRPO trainer.")
_serve_app = typer.Typer(no_args_is_help=True, help="Run one SkillOS service in the foreground.")
_app.add_typer(_serve_app, name="serve")
_app.add_typer(token_app, name="token")   # the core's own: token lists by digest (`skillos.auth`)
_registered = False

# Each part declares its commands in pyproject.toml ([project.entry-points."skillos.commands"]:
# name = "module:register", register(app, serve_app)); the core names no service.
COMMANDS_GROUP = "skillos.commands"


def _register_parts() -> None:
    global _registered
    if _registered:
        return
    found = sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name)
    if not found:
        raise SystemExit("skillos: no commands registered: the package is not installed "
                         "(run `make setup`, or `pip install -e .` in the checkout)")
    _registered = True
    for ep in found:
        ep.load()(_app, _serve_app)


# The parts register on first use of `app` / `serve_app`, not at import: a part's cli.py imports
# skillos.cli.common, so registering at import would load that part again half-initialised
# (importing `services.skillrepo.cli` first failed with an import circle).
def __getattr__(name: str) -> typer.Typer:
    if name in ("app", "serve_app"):
        _register_parts()
        return _app if name == "app" else _serve_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    _register_parts()
    _app()
