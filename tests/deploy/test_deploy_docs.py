"""The deployment guide's commands are the ones CI checks: every command in a bash block of
docs/deployment.md is run (helm lint/template, kubectl kustomize, hadolint, check-jsonschema),
run in its offline form (helm upgrade --install -> helm template, kubectl apply -k -> kubectl
kustomize), or checked against the files it names (docker compose, docker build, kubectl get/logs)."""

from __future__ import annotations

import functools
import re
import shlex
import sys

import pytest
import yaml
from deploy_tools import COMPOSE, ROOT, helm_template, load_compose, run, tool, validate_k8s, values_files
from test_deploy_images import stages

GUIDE = ROOT / "docs" / "deployment.md"
# commands that only talk to a running system or the shell; nothing to check offline
PASSIVE = ("echo", "curl", "openssl")


def guide_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    lines = [line.split(" # ")[0].strip() for b in blocks for line in b.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


COMMANDS = guide_commands()


@functools.lru_cache(maxsize=1)
def rendered_names() -> set[str]:
    names = set()
    for values in values_files():
        for obj in helm_template(values):
            names.add(f"{obj['kind'].lower()}/{obj['metadata']['name']}")
    return names


def check_helm(argv: list[str]) -> None:
    helm = tool("helm")
    verb = argv[1]
    if verb in ("lint", "template"):
        out = run(helm, *argv[1:]).stdout
        if verb == "template":
            assert validate_k8s([d for d in yaml.safe_load_all(out) if d]) == []
        return
    if verb in ("test", "history", "rollback", "uninstall"):
        # they talk to a release: the release and namespace are the guide's, rollback names a revision
        assert argv[2] == "skillos" and argv[argv.index("--namespace") + 1] == "skillos", argv
        if verb == "rollback":
            assert argv[3].isdigit(), argv
        return
    assert verb == "upgrade" and "--install" in argv, f"unexpected helm command {argv}"
    rest, keep, i = argv[2:], [], 0
    while i < len(rest):
        arg = rest[i]
        if arg in ("--install", "--create-namespace", "--wait", "--atomic"):
            i += 1
            continue
        if arg == "--timeout":
            i += 2
            continue
        keep.append(arg)
        i += 1
    out = run(helm, "template", *keep).stdout
    assert validate_k8s([d for d in yaml.safe_load_all(out) if d]) == []


def check_kubectl(argv: list[str]) -> None:
    args = [a for a in argv[1:]]
    if args[:2] == ["-n", "skillos"] or args[:2] == ["--namespace", "skillos"]:
        args = args[2:]
    if args[0] == "kustomize":
        run(tool("kubectl"), "kustomize", *args[1:])
    elif args[0] == "apply" and args[1] == "-k":
        run(tool("kubectl"), "kustomize", args[2])
    elif args[0] == "apply" and args[1] == "-f":
        objs = [d for d in yaml.safe_load_all((ROOT / args[2]).read_text()) if d]
        assert validate_k8s(objs) == []
    elif args[0] in ("wait", "cp", "delete", "create"):
        # the helper pod of deploy/k8s/data-loader.yaml, the chart's labels, the namespace
        loader = {f"{d['kind'].lower()}/{d['metadata']['name']}"
                  for d in yaml.safe_load_all((ROOT / "deploy" / "k8s" / "data-loader.yaml").read_text()) if d}
        if args[0] == "cp":
            assert f"pod/{args[2].split(':')[0]}" in loader and args[1].startswith("../shared/data/"), argv
        elif args[0] == "wait":
            target = next(a for a in args[1:] if not a.startswith("-") and a != "pod")
            assert target in loader or "-l" in args, argv
            if "-l" in args:
                for sel in args[args.index("-l") + 1].split(","):
                    key, _, value = sel.replace("!=", "=").partition("=")
                    assert any((o["metadata"].get("labels") or {}).get(key) == value
                               for o in helm_template("values-cpu.yaml")), f"no object labelled {sel}"
        elif args[0] == "delete" and args[1] == "pod":
            assert f"pod/{args[2]}" in loader, argv
        else:
            assert args[1:] == ["namespace", "skillos"], argv
    elif args[0] in ("get", "logs", "rollout"):
        refs = [a for a in args if re.fullmatch(r"[a-z]+/[a-z0-9-]+", a)]
        if args[0] == "get" and len(args) > 2 and not args[2].startswith("-"):
            refs.append(f"{args[1]}/{args[2]}")
        names = rendered_names()
        for ref in refs:
            assert ref in names, f"`{' '.join(argv)}` names {ref}, which the chart does not render"
    else:
        raise AssertionError(f"no offline check for `{' '.join(argv)}`")


def check_compose_v1(argv: list[str]) -> None:
    """docker-compose 1.29 with the file deploy/compose_v1.py generates: its profiles and services."""
    sys.path.insert(0, str(ROOT / "deploy"))
    import compose_v1

    args, profiles = argv[1:], []
    while args and args[0].startswith("-"):
        flag, value, args = args[0], args[1], args[2:]
        if flag == "--profile":
            profiles.append(value)
        elif flag == "-f":
            assert value == "docker-compose.v1.yml", f"docker-compose 1.29 needs the generated file, not {value}"
        else:
            assert flag == "-p", flag
    doc = yaml.safe_load(compose_v1.render(profiles))
    active = compose_v1.active_services(doc, set(profiles))
    assert args[0] in ("up", "ps", "logs", "run", "build", "down", "config"), args
    for name in (a for a in args[1:] if not a.startswith("-")):
        assert name in active, f"`{' '.join(argv)}`: {name} is not active"


def check_docker(argv: list[str]) -> None:
    if argv[1] == "build":
        all_stages = stages()
        dockerfile = ROOT / argv[argv.index("-f") + 1]
        assert dockerfile.exists()
        assert argv[argv.index("--target") + 1] in all_stages
        declared = set(re.findall(r"^ARG (\w+)", dockerfile.read_text(), re.MULTILINE))
        for i, a in enumerate(argv):
            if a == "--build-arg":
                assert argv[i + 1].split("=")[0] in declared
        assert argv[-1] == "."
        return
    assert argv[1] == "compose", argv
    args, profiles, env_files = argv[2:], [], []
    while args and args[0].startswith("--"):
        flag, value, args = args[0], args[1], args[2:]
        (profiles if flag == "--profile" else env_files).append(value)
    compose = load_compose({"SKILLOS_API_TOKEN": "t", "POSTGRES_PASSWORD": "p"})
    services = compose["services"]
    known_profiles = {p for s in services.values() for p in s.get("profiles", [])}
    assert set(profiles) <= known_profiles, profiles
    for f in env_files:
        assert f == ".env" or (ROOT / f).exists(), f
    sub, rest = args[0], args[1:]
    assert sub in ("up", "ps", "logs", "run", "build", "down", "config"), sub
    for name in (a for a in rest if not a.startswith("-")):
        assert name in services, f"`{' '.join(argv)}`: no service {name}"
        needs = set(services[name].get("profiles", []))
        assert not needs or needs & set(profiles) or sub == "logs", f"{name} needs --profile {needs}"


@pytest.mark.parametrize("command", COMMANDS)
def test_guide_command(command):
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|")
    lexer.whitespace_split = True
    tokens = list(lexer)
    argv = tokens[:tokens.index("|")] if "|" in tokens else tokens
    while re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):  # VAR=value prefixes: the variable must be used
        var, value = argv.pop(0).split("=", 1)
        if var == "DOCKER_BUILDKIT":
            assert value == "1" and argv[:2] == ["docker", "build"], "DOCKER_BUILDKIT=1 goes with docker build"
            continue
        if var.startswith("SKILLOS_K8S_"):
            assert var in (ROOT / "deploy" / "k8s_check.py").read_text(), f"{var} is not read by k8s-check"
            continue
        if var.startswith("SKILLOS_CHECK_") or var == "SKILLOS_COMPOSE":
            assert var in (ROOT / "deploy" / "compose_check.py").read_text(), f"{var} is not read by compose-check"
            continue
        assert f"${{{var}" in COMPOSE.read_text() or var in ("CI",), f"{var} is not read by docker-compose.yml"
        if var == "TRAIN_CONFIG":
            assert (ROOT / "configs" / value).is_file(), value
    head = argv[0]
    if head in PASSIVE:
        return
    if head == "helm":
        check_helm(argv)
    elif head == "kubectl":
        check_kubectl(argv)
    elif head == "docker":
        check_docker(argv)
    elif head in ("hadolint", "check-jsonschema"):
        run(tool(head), *argv[1:])
    elif head == "docker-compose":
        check_compose_v1(argv)
    elif head == "make":
        targets = re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE)
        assert argv[1:] and all(a in targets for a in argv[1:]), f"no make target {argv[1:]}"
    elif head == "python" and argv[1] == "deploy/pyindex.py":
        # fill fetches GBs and serve runs until stopped: checked against the script's own parser
        sys.path.insert(0, str(ROOT / "deploy"))
        import pyindex

        pyindex.build_parser().parse_args(argv[2:])
    elif head == "python":
        run(sys.executable, *argv[1:])
    else:
        raise AssertionError(f"the guide uses `{head}`, which tests/deploy/test_deploy_docs.py does not check")


def test_guide_covers_every_deployment_path():
    text = " ".join(COMMANDS)
    for needle in ("--profile cpu", "--profile gpu", "--profile trainer", "values-gpu.yaml", "values-training.yaml",
                   "values-external-db.yaml", "kubectl kustomize k8s/overlays/cpu", "kubectl kustomize k8s/overlays/gpu",
                   "helm upgrade --install"):
        assert needle in text, f"the guide has no command with {needle}"
    assert COMPOSE.exists()
