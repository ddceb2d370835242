"""Commands of the environment servers: `skillos serve alfworld|webshop|reasoning`, `skillos data ...`.

Imports inside the commands are deliberate: every part's cli.py is loaded whenever any `skillos` command
starts (registration), so what only one command needs stays in it: the env servers (FastAPI, ALFWorld/TextWorld, WebShop's product index, reasoning-gym).
"""

from __future__ import annotations

from pathlib import Path

import typer

from skillos.cli.common import HostOption, fail, print_json
from skillos.cli.serve import serve_service

DataDirOption = typer.Option(None, "--data-dir", help="Data directory (default: the SKILLOS_<ENV>_DATA setting).")
AlfworldDestOption = typer.Option(None, "--dest", help="default: SKILLOS_ALFWORLD_DATA")
WebshopDestOption = typer.Option(None, "--dest", help="default: SKILLOS_WEBSHOP_DATA")
WebshopSetOption = typer.Option("small", "--set", help="small (1,000 products) or all")
VerifyOption = typer.Option(False, "--verify", help="only check the files present")


def build_environment(name: str, data_dir: Path | None, settings):
    """The `Environment` of one server, from its data directory (the CLI option or the setting)."""
    if name == "alfworld":
        from services.envs.alfworld.environment import AlfworldEnvironment

        return AlfworldEnvironment(data_dir or settings.alfworld_data,
                                   spare_workers=settings.alfworld_spare_workers,
                                   games_per_worker=settings.alfworld_games_per_worker,
                                   step_timeout_s=settings.env_step_timeout_s,
                                   reset_timeout_s=settings.env_reset_timeout_s,
                                   parse_cache=settings.alfworld_parse_cache)
    if name == "webshop":
        from services.envs.webshop.environment import WebShopEnvironment

        return WebShopEnvironment(Path(data_dir or settings.webshop_data))
    if name == "reasoning":
        from services.envs.reasoning.environment import build_reasoning_environment

        return build_reasoning_environment(settings.reasoning_source, data_dir or settings.reasoning_data,
                                           families=settings.reasoning_families,
                                           tasks_per_split=settings.reasoning_tasks_per_split)
    raise ValueError(f"unknown environment {name!r}")


def _serve(name: str, host: str, port: int, data_dir: Path | None, **overrides) -> None:
    from pydantic import ValidationError

    from services.envs.app import build_app
    from services.envs.settings import EnvServerSettings

    try:  # the command's options over the environment's settings, validated as the settings are
        settings = EnvServerSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        fail(f"invalid settings: {e}")

    def build():
        settings.env_advertise_url = settings.env_advertise_url.replace("{port}", str(port))
        return build_app(build_environment(name, data_dir, settings), settings)

    serve_service(settings, build, host, port, refuse=(FileNotFoundError, ValueError))


def register(app: typer.Typer, serve_app: typer.Typer) -> None:
    @serve_app.command("alfworld")
    def serve_alfworld(host: str = HostOption, port: int = typer.Option(8010, "--port"),
                       data_dir: Path | None = DataDirOption) -> None:
        """ALFWorld (real TextWorld games in worker processes) over the env protocol."""
        _serve("alfworld", host, port, data_dir)

    @serve_app.command("webshop")
    def serve_webshop(host: str = HostOption, port: int = typer.Option(8011, "--port"),
                      data_dir: Path | None = DataDirOption) -> None:
        """WebShop (product search and purchase) over the env protocol."""
        _serve("webshop", host, port, data_dir)

    @serve_app.command("reasoning")
    def serve_reasoning(host: str = HostOption, port: int = typer.Option(8012, "--port"),
                        data_dir: Path | None = DataDirOption,
                        source: str = typer.Option(None, "--source", help=(
                            "auto | reasoning-gym | jsonl (default: SKILLOS_REASONING_SOURCE, auto: reasoning-gym's "
                            "families and the demo set, or the JSONL files of --data-dir alone)")),
                        families: str = typer.Option(None, "--families", help=(
                            "reasoning-gym families, comma-separated (default: SKILLOS_REASONING_FAMILIES)")),
                        tasks_per_split: int = typer.Option(None, "--tasks-per-split", min=1, help=(
                            "tasks listed per family and split (default: SKILLOS_REASONING_TASKS_PER_SPLIT)"))) -> None:
        """Single-turn reasoning tasks (reasoning-gym's generators, <split>.jsonl files) over the env protocol."""
        _serve("reasoning", host, port, data_dir, reasoning_source=source, reasoning_families=families,
               reasoning_tasks_per_split=tasks_per_split)

    data_app = typer.Typer(no_args_is_help=True, help="Download and check the environments' data sets.")
    app.add_typer(data_app, name="data")

    @data_app.command("alfworld")
    def data_alfworld(dest: Path | None = AlfworldDestOption) -> None:
        """Download the official ALFWorld games (needs internet) with alfworld's own downloader."""
        from services.envs.data import download_alfworld
        from services.envs.settings import EnvServerSettings

        target = dest or EnvServerSettings().alfworld_data
        try:
            download_alfworld(Path(target))
        except Exception as e:  # noqa: BLE001 - say what went wrong, no traceback
            fail(f"ALFWorld download failed: {e}")
        typer.echo(f"ALFWorld data in {target}; serve it with SKILLOS_ALFWORLD_DATA={target}")

    @data_app.command("webshop")
    def data_webshop(dest: Path | None = WebshopDestOption, which: str = WebshopSetOption,
                     verify: bool = VerifyOption) -> None:
        """Download WebShop's official files (needs internet) and check them against their git blob ids."""
        from services.envs.data import download_webshop, verify_webshop
        from services.envs.settings import EnvServerSettings

        target = Path(dest or EnvServerSettings().webshop_data)
        if verify:
            report = verify_webshop(target)
            print_json(report)
            if not report:
                fail(f"no WebShop files found in {target}")
            if any(v.startswith("mismatch") for v in report.values()):
                fail("some files differ from the official ones")
            return
        if which not in ("small", "all"):
            fail("--set must be 'small' or 'all'")
        try:
            print_json(download_webshop(target, which, echo=typer.echo))
        except Exception as e:  # noqa: BLE001
            fail(f"WebShop download failed: {e}")
