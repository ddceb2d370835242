"""What the deployment files must agree with: every setting the SkillOS code reads.

Sources, all read from the code itself (nothing listed by hand):
- every ``CommonSettings`` subclass (``skillos.settings.all_settings_classes()``) after importing
  each part's settings module (and the env servers' per-environment ones); env var = ``SKILLOS_<FIELD>``;
- the LLM role settings of ``skillos.llm.settings`` (``SKILLOS_LLM_<FIELD>`` shared by all roles,
  ``SKILLOS_<ROLE>_LLM_<FIELD>`` per role);
- command-line options bound to an environment variable (``envvar="SKILLOS_..."`` in ``cli.py``).

Run as a script to print every name with its code default, or to append the missing ones to
deploy/skillos.env and the chart's values.yaml (k8s/ is re-rendered from the chart afterwards):
    .venv/bin/python tests/deploy/deploy_inventory.py [--write-missing]
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# part -> module holding its settings class(es); a part whose module does not exist is recorded in
# Inventory.missing_parts (the tests skip it on a developer machine and fail under CI=true)
PART_SETTINGS_MODULES = {
    "common": "skillos.settings",
    "skillrepo": "services.skillrepo.settings",
    "envs": "services.envs.settings",
    "executor": "services.executor.settings",
    "curator": "services.curator.settings",
    "trainer": "services.trainer.settings",
    "llm": "skillos.llm.settings",
}

# names that hold credentials: they belong in Secrets, never in a ConfigMap
SECRET_NAME = re.compile(r"(_TOKEN|AUTH_TOKENS|API_KEY|PASSWORD|SECRET|DATABASE_URL|REDIS_URL)$")
CLI_ENVVAR = re.compile(r'envvar\s*=\s*"(SKILLOS_[A-Z0-9_]+)"')


@dataclass
class Setting:
    name: str           # the environment variable, e.g. SKILLOS_DATABASE_URL
    default: object     # the code default (None: unset)
    owner: str          # class or module that reads it
    required: bool = True   # must be set or defaulted in compose / Helm (False: optional variant)


@dataclass
class Inventory:
    settings: dict[str, Setting] = field(default_factory=dict)
    missing_parts: dict[str, str] = field(default_factory=dict)   # part -> why it was skipped
    classes: dict[str, type] = field(default_factory=dict)        # part -> its settings class

    @property
    def required(self) -> set[str]:
        return {n for n, s in self.settings.items() if s.required}

    @property
    def known(self) -> set[str]:
        return set(self.settings)


def module_exists(module: str) -> bool:
    return (ROOT / (module.replace(".", "/") + ".py")).exists()


def all_part_modules() -> dict[str, str]:
    """The expected parts plus any other settings module found in the tree (a part added later)."""
    parts = dict(PART_SETTINGS_MODULES)
    for path in sorted([*ROOT.glob("services/*/settings.py"), *ROOT.glob("skillos/*/settings.py")]):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if module not in parts.values():
            parts[path.parent.name] = module
    return parts


def _env_name(cls, field_name: str) -> str:
    prefix = cls.model_config.get("env_prefix", "") or ""
    return (prefix + field_name).upper()


def collect() -> Inventory:
    from skillos import settings as common

    inv = Inventory()
    for part, module in all_part_modules().items():
        if not module_exists(module):
            inv.missing_parts[part] = f"{module.replace('.', '/')}.py does not exist"
            continue
        mod = importlib.import_module(module)
        defined = [obj for obj in vars(mod).values()
                   if isinstance(obj, type) and issubclass(obj, common.CommonSettings) and obj.__module__ == module]
        if defined:
            # a part's settings class: skillos.settings' StackSettings (everything the harness's commands
            # read; the module's other classes are pieces, some wider, e.g. ActingSettings), else the widest
            # one its module defines (a service module defines just its own)
            inv.classes[part] = (common.StackSettings if module == "skillos.settings"
                                 else max(defined, key=lambda cls: len(cls.model_fields)))

    for cls in common.all_settings_classes():
        for fname, finfo in cls.model_fields.items():
            name = _env_name(cls, fname)
            inv.settings.setdefault(name, Setting(name, finfo.default, cls.__name__))

    if "llm" in inv.classes or module_exists(PART_SETTINGS_MODULES["llm"]):
        llm = importlib.import_module(PART_SETTINGS_MODULES["llm"])
        defaults = llm.LLMSettings.model_fields
        for fname in llm._LLMEnv.model_fields:
            default = defaults[fname].default if fname in defaults else None
            # one shared value per field is enough: roles fall back to SKILLOS_LLM_<FIELD>
            inv.settings[f"SKILLOS_LLM_{fname.upper()}"] = Setting(
                f"SKILLOS_LLM_{fname.upper()}", default, "skillos.llm.LLMSettings")
            for role in llm.ROLES:
                name = f"SKILLOS_{role.upper()}_LLM_{fname.upper()}"
                # where each role's server is must be explicit in a deployment
                per_role = fname in ("base_url", "model")
                inv.settings[name] = Setting(name, default, f"skillos.llm ({role} role)", required=per_role)

    for path in sorted([*ROOT.glob("services/*/cli.py"), *ROOT.glob("skillos/**/cli.py"),
                        *ROOT.glob("skillos/cli/*.py")]):
        for name in CLI_ENVVAR.findall(path.read_text()):
            rel = str(path.relative_to(ROOT))
            # options of `serve` commands that the deployment passes as flags (--host, --port) are optional
            optional = name == "SKILLOS_HOST" or name.endswith("_PORT")
            inv.settings.setdefault(name, Setting(name, None, rel, required=not optional))
    return inv


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def _env_value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def write_missing() -> list[str]:
    """Append every required setting missing from deploy/skillos.env and the chart's values.yaml,
    at its code default (None: commented out / null), so the deployment files catch up with the code."""
    import json

    import yaml

    inv = collect()
    env_path = ROOT / "deploy" / "skillos.env"
    values_path = ROOT / "deploy" / "helm" / "skillos" / "values.yaml"
    env_text = env_path.read_text()
    compose_text = (ROOT / "docker-compose.yml").read_text()  # per-service values set there
    values = yaml.safe_load(values_path.read_text())
    listed = set(values["config"]) | set(values["secretConfig"])
    added, env_lines, config_lines, secret_lines = [], [], [], []
    for name in sorted(inv.required):
        default = inv.settings[name].default
        if not re.search(rf"^#?\s*{name}=", env_text, re.MULTILINE) and not re.search(rf"\b{name}:", compose_text):
            env_lines.append(f"# {name}=" if default is None else f"{name}={_env_value(default)}")
            added.append(f"deploy/skillos.env: {name}")
        # computed by the chart from llm.mode, services and the bundled databases
        computed = name.endswith(("_URL", "_LLM_MODEL", "AUTH_TOKENS")) or name in (
            "SKILLOS_CURATOR_OUTPUT_MODE", "SKILLOS_CURATOR_JSON_STYLE")
        if name not in listed and not computed:
            if is_secret(name):
                secret_lines.append(f'  {name}: ""')
            else:
                config_lines.append(f"  {name}: {'null' if default is None else json.dumps(default)}")
            added.append(f"values.yaml: {name}")
    if env_lines:
        env_path.write_text(env_text.rstrip("\n") + "\n\n# ---- added by tests/deploy/deploy_inventory.py --write-missing\n"
                            + "\n".join(env_lines) + "\n")
    text = values_path.read_text()
    if config_lines:
        text = text.replace("\nconfig:\n", "\nconfig:\n" + "\n".join(config_lines) + "\n", 1)
    if secret_lines:
        text = text.replace("\nsecretConfig:\n", "\nsecretConfig:\n" + "\n".join(secret_lines) + "\n", 1)
    values_path.write_text(text)
    if added:  # k8s/ is rendered from the chart's values
        import subprocess
        import sys

        subprocess.run([sys.executable, str(ROOT / "deploy" / "render_k8s.py")], check=True)
    return added


if __name__ == "__main__":
    import sys

    if "--write-missing" in sys.argv:
        for line in write_missing() or ["nothing missing"]:
            print(line)
        sys.exit(0)
    inv = collect()
    for part, why in inv.missing_parts.items():
        print(f"# skipped {part}: {why}")
    for name in sorted(inv.settings):
        s = inv.settings[name]
        flag = "" if s.required else "  (optional)"
        print(f"{name}={'' if s.default is None else s.default}    # {s.owner}{flag}{' SECRET' if is_secret(name) else ''}")
