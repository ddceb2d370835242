"""Settings shared by every part. Each part subclasses `CommonSettings` in its own `settings.py`.

All names are environment variables prefixed ``SKILLOS_`` (a ``.env`` file in the working directory
is read too). The same names are used in docker-compose, the Helm values and the CLI options, and
`all_settings_classes()` lists them for the test that checks that.
"""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

# ../shared/data beside the checkout: where development and CI keep the real data sets.
_REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SHARED_DATA = _REPO_ROOT.parent / "shared" / "data"


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SKILLOS_", env_file=".env", extra="ignore")

    # logging: "json" for machines (default in deployment), "console" for people
    log_level: str = "INFO"
    log_format: str = "json"

    # bearer token this process sends to other SkillOS services (empty: none)
    api_token: str = ""

    # where the other services are (defaults: ARCHITECTURE.md ports on loopback)
    skillrepo_url: str = "http://127.0.0.1:8001"
    executor_url: str = "http://127.0.0.1:8002"
    curator_url: str = "http://127.0.0.1:8003"
    alfworld_url: str = "http://127.0.0.1:8010"
    webshop_url: str = "http://127.0.0.1:8011"
    reasoning_url: str = "http://127.0.0.1:8012"
    console_url: str = "http://127.0.0.1:8004"   # the web console (`skillos run` links to it when it is up)

    # data directories, honoured by every command (serve, up, run, group, train)
    alfworld_data: Path = DEFAULT_SHARED_DATA / "alfworld"
    webshop_data: Path = DEFAULT_SHARED_DATA / "webshop"
    reasoning_data: Path | None = None  # None: the small demonstration set shipped with the package


def all_settings_classes() -> list[type[BaseSettings]]:
    """Every settings class of the project (for the compose/Helm/code name consistency test)."""
    seen: list[type[BaseSettings]] = []
    stack = [CommonSettings]
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen.append(cls)
            stack.extend(cls.__subclasses__())
    return seen
