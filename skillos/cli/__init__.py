"""The `skillos` command. Each part registers its own commands from its `cli.py`.

Heavy imports (torch, alfworld, SQLAlchemy models) stay inside the command functions so that
`skillos --help` and thin client commands start fast.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="SkillOS: skill repo, environments, executor, curator and GRPO trainer.")
serve_app = typer.Typer(no_args_is_help=True, help="Run one SkillOS service in the foreground.")
app.add_typer(serve_app, name="serve")

# Each part declares its commands in pyproject.toml ([project.entry-points."skillos.commands"]:
# name = "module:register", register(app, serve_app)); the core names no service.
COMMANDS_GROUP = "skillos.commands"


def _register_parts() -> None:
    found = sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name)
    if not found:
        raise SystemExit("skillos: no commands registered: the package is not installed "
                         "(run `make setup`, or `pip install -e .` in the checkout)")
    for ep in found:
        ep.load()(app, serve_app)


_register_parts()


def main() -> None:
    app()
