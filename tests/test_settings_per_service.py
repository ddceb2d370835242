"""One settings object per service, holding only what that service reads.

Each service's settings class composes pieces of `skillos.settings`; these tests read the service's
code and fail when its class carries a setting the code never reads (the skill repo handed every
URL, the console handed a token it must not use) or when two services' classes stop differing.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from skillos import settings as common

ROOT = Path(__file__).resolve().parents[1]

# service folder -> its settings classes (module:Class)
SERVICE_SETTINGS = {
    "skillrepo": ["services.skillrepo.settings:SkillRepoSettings"],
    "envs": ["services.envs.settings:EnvServerSettings", "services.envs.webshop.settings:WebShopSettings"],
    "executor": ["services.executor.settings:ExecutorSettings"],
    "curator": ["services.curator.settings:CuratorSettings"],
    "console": ["services.console.settings:ConsoleSettings"],
    "mcp": ["services.mcp.settings:MCPSettings"],
    "trainer": ["services.trainer.settings:TrainerSettings"],
}


def _load(ref: str) -> type:
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def _fields_read_by_methods() -> dict[str, set[str]]:
    """method name -> the `self.<field>` it reads, for the helper methods of skillos/settings.py
    (`env_url` reads the three env URLs, `curation_options` the curator_* fields)."""
    tree = ast.parse((ROOT / "skillos" / "settings.py").read_text())
    out: dict[str, set[str]] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            out[fn.name] = {a.attr for a in ast.walk(fn)
                            if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "self"}
    return out


def _service_code(service: str) -> str:
    """The service's code, without its settings modules (where every field is merely declared)."""
    return "\n".join(p.read_text() for p in sorted((ROOT / "services" / service).rglob("*.py"))
                     if p.name != "settings.py")


@pytest.mark.parametrize("service", list(SERVICE_SETTINGS))
def test_a_service_settings_hold_only_what_the_service_reads(service):
    code = _service_code(service)
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))
    methods = _fields_read_by_methods()
    read_through_methods = set().union(*(fields for name, fields in methods.items() if name in words))
    logging = set(common.CommonSettings.model_fields)  # read by skillos.logging for every process
    unread = {}
    for ref in SERVICE_SETTINGS[service]:
        cls = _load(ref)
        extra = sorted(f for f in cls.model_fields
                       if f not in logging and f not in words and f not in read_through_methods)
        if extra:
            unread[cls.__name__] = extra
    assert not unread, (f"services/{service} never reads {unread}: compose its settings class from the "
                        f"pieces of skillos/settings.py it uses, not from wider ones")


def test_every_service_settings_class_is_listed_here():
    """A new service's settings class is checked too: it must be named in SERVICE_SETTINGS."""
    listed = {_load(ref) for refs in SERVICE_SETTINGS.values() for ref in refs}
    for module in sorted(ROOT.glob("services/**/settings.py")):
        importlib.import_module(".".join(module.relative_to(ROOT).with_suffix("").parts))
    found = {cls for cls in common.all_settings_classes() if cls.__module__.startswith("services.")}
    assert found <= listed, f"not checked: {sorted(c.__name__ for c in found - listed)}"


def test_what_each_service_may_reach():
    """Who calls whom, as ARCHITECTURE.md draws it: the skill repo and the env servers call nobody, the
    console reads the skill repo with each user's own token (never a service token)."""
    def fields(ref):
        return set(_load(ref).model_fields)

    urls = {f for f in common.StackSettings.model_fields if f.endswith("_url")}
    assert not fields(SERVICE_SETTINGS["skillrepo"][0]) & (urls | {"api_token"})
    assert not fields(SERVICE_SETTINGS["envs"][0]) & (urls | {"api_token"})
    assert fields(SERVICE_SETTINGS["console"][0]) & (urls | {"api_token"}) == {"skillrepo_url"}
    # the executor's skill gateway hands its agents' trajectories to the curator
    assert fields(SERVICE_SETTINGS["executor"][0]) & urls == {"skillrepo_url", "alfworld_url", "webshop_url",
                                                               "reasoning_url", "curator_url"}
    assert fields(SERVICE_SETTINGS["curator"][0]) & urls == {"skillrepo_url"}


def test_env_url_is_the_one_mapping_from_an_env_name_to_its_server():
    s = common.StackSettings(_env_file=None, alfworld_url="http://a:1", webshop_url="http://w:2",
                             reasoning_url="http://r:3")
    assert [s.env_url(e) for e in ("alfworld", "webshop", "reasoning")] == ["http://a:1", "http://w:2", "http://r:3"]
    with pytest.raises(KeyError):
        s.env_url("minecraft")
