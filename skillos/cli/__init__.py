"""The `skillos` command. Each part registers its own commands from its `cli.py`.

Heavy imports (torch, alfworld, SQLAlchemy models) stay inside the command functions so that
`skillos --help` and thin client commands start fast.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="SkillOS: skill repo, environments, executor, curator and GRPO trainer.")
serve_app = typer.Typer(no_args_is_help=True, help="Run one SkillOS service in the foreground.")
app.add_typer(serve_app, name="serve")

# module paths of the parts' command registrations: each defines register(app, serve_app)
PART_CLIS = (
    "services.skillrepo.cli",
    "services.envs.cli",
    "skillos.llm.cli",
    "skillos.models.cli",
    "services.executor.cli",
    "services.curator.cli",
    "skillos.stream.cli",
    "services.trainer.cli",
    "services.console.cli",
)

for _module in PART_CLIS:
    importlib.import_module(_module).register(app, serve_app)


def main() -> None:
    app()
