"""Commands of the skill repo: `skillos serve skillrepo` and `skillos repo ...` (a client of a running service).

Imports inside the commands are deliberate: every part's cli.py is loaded whenever any `skillos` command
starts (registration), so what only one command needs stays in it: the skill repo's app and store (FastAPI, SQLAlchemy, Alembic) and its client's settings.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import typer

from skillos.cli.common import HostOption, fail, print_json
from skillos.cli.serve import serve_service

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples" / "skills"

UrlOption = typer.Option("http://127.0.0.1:8001", "--url", envvar="SKILLOS_SKILLREPO_URL",
                         help="The skill repo service.")
SeedOption = typer.Option("", "--seed", help="create this repo from --seed-dir if it does not exist yet")
SeedDirOption = typer.Option(EXAMPLES_DIR, "--seed-dir", help="folder of <name>/SKILL.md folders")
SnapshotOption = typer.Option(None, "--snapshot", help="fork the repo as it was at this snapshot")
KOption = typer.Option(5, "-k", help="how many hits")
OutOption = typer.Option(None, "-o", "--out", help="file (default REPO.tar.gz)")
SourceArchiveArg = typer.Argument(..., help="a tar.gz, or a folder of <name>/SKILL.md")
TokenOption = typer.Option("", "--token", envvar="SKILLOS_API_TOKEN", help="Bearer token (none in open mode).")


def folder_archive(path: Path) -> bytes:
    """A tar.gz of every */SKILL.md under ``path`` (a folder of skill folders, or one skill folder), each
    with its worked examples (examples/*.md)."""
    files = sorted(path.rglob("SKILL.md"))
    if not files:
        raise FileNotFoundError(f"no SKILL.md under {path}")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in files:
            tar.add(f, arcname=f"{f.parent.name}/SKILL.md")
            for example in sorted((f.parent / "examples").glob("*.md")):
                tar.add(example, arcname=f"{f.parent.name}/examples/{example.name}")
    return buf.getvalue()


def _examples_note(examples) -> str:
    return f"{len(examples)} worked examples: {', '.join(e.id for e in examples)}" if examples else ""


def seed_repo(svc, repo: str, folder: Path) -> None:
    """Create ``repo`` from the example skills unless it exists (the embedded default's first start)."""
    from skillos.errors import APIError

    try:
        svc.get_repo(repo)
        return
    except APIError:
        pass
    svc.create_repo(repo)
    svc.import_(repo, folder_archive(folder))


def _client(url: str, token: str):
    from skillos.clients.skillrepo import SkillRepoClient

    return SkillRepoClient(url, token=token or None)


def _run(fn):
    from skillos.clients.skillrepo import SkillRepoError

    try:
        return fn()
    except SkillRepoError as e:
        fail(f"{e.status} {e.code}: {e.message}")


def _read(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    p = Path(source)
    if p.is_dir():
        p = p / "SKILL.md"
    if not p.exists():
        fail(f"{source}: no such file")
    return p.read_text(encoding="utf-8")


repo_app = typer.Typer(no_args_is_help=True, help="Talk to a running skill repo service.")


def serve_skillrepo(host: str = HostOption, port: int = typer.Option(8001, "--port"),
                    seed: str = SeedOption, seed_dir: Path = SeedDirOption) -> None:
    """The skill repo service (SKILLOS_DATABASE_URL, SKILLOS_REDIS_URL, SKILLOS_AUTH_MODE ...)."""
    from services.skillrepo.app import build_app
    from services.skillrepo.settings import SkillRepoSettings

    def seed_first(application) -> None:
        if seed:
            seed_repo(application.state.skillrepo, seed, seed_dir)

    settings = SkillRepoSettings()
    serve_service(settings, lambda: build_app(settings), host, port, refuse=(ValueError,), then=seed_first)


ReviewOption = typer.Option(None, "--review/--no-review", help=(
    "curator op batches wait for a person's review (default: the service's SKILLOS_REVIEW_DEFAULT)"))


@repo_app.command("create")
def create(name: str, review: bool = ReviewOption, url: str = UrlOption, token: str = TokenOption) -> None:
    """Create a repo."""
    policy = None if review is None else {"review": review}
    print_json(_run(lambda: _client(url, token).create_repo(name, policy)).model_dump(mode="json"))


@repo_app.command("policy")
def policy(repo: str, review: bool = ReviewOption,
           trusted: list[str] = typer.Option(None, "--trusted", help="a token label whose op batches apply at once "
                                                                     "(repeat; '' clears)"),
           pin: list[str] = typer.Option(None, "--pin", help="a skill no op batch may change (repeat; '' clears)"),
           reviewer: list[str] = typer.Option(None, "--reviewer", help="a token label that may approve or reject "
                                                                       "proposals besides operators (repeat; '' "
                                                                       "clears)"),
           candidates: bool = typer.Option(None, "--candidates/--no-candidates", help=(
               "skills written from traffic start as candidates, served to an exploration share until promoted")),
           promote_after: int = typer.Option(None, "--promote-after", help=(
               "promote a candidate served in this many tasks whose utility interval starts at or above 0 "
               "(0 clears)")),
           retire_harmful: bool = typer.Option(None, "--retire-harmful/--keep-harmful", help=(
               "retire a traffic-written skill whose utility interval lies below 0")),
           utility_source: list[str] = typer.Option(None, "--utility-source", help=(
               "an outcome source the rules count: environment, judge, caller (repeat)")),
           url: str = UrlOption, token: str = TokenOption) -> None:
    """Show the repo's policy for curator op batches; with options (an operator's token), change it."""
    c = _client(url, token)
    current = _run(lambda: c.get_policy(repo))
    update = {key: value for key, value in {
        "review": review, "candidates": candidates, "retire_harmful": retire_harmful,
        "trusted_writers": [t for t in trusted if t] if trusted is not None else None,
        "pinned": [p for p in pin if p] if pin is not None else None,
        "reviewers": [r for r in reviewer if r] if reviewer is not None else None,
        "utility_sources": utility_source or None}.items() if value is not None}
    if promote_after is not None:
        update["promote_after"] = promote_after or None
    if update:
        changed = type(current).model_validate({**current.model_dump(), **update})   # validated, unlike a copy
        current = _run(lambda: c.set_policy(repo, changed))
    print_json(current.model_dump(mode="json"))


@repo_app.command("proposals")
def proposals(repo: str, status: str = typer.Option("pending", "--status", help="pending, approved, rejected"),
              url: str = UrlOption, token: str = TokenOption) -> None:
    """Op batches waiting for review (or decided), newest first."""
    for p in _run(lambda: _client(url, token).proposals(repo, status or None)):
        names = ", ".join(f"{v.name} {v.skill_name or '?'}" for v in p.verdicts if v.status != "refused")
        typer.echo(f"{p.id}	{p.status}	{p.created_at:%Y-%m-%d %H:%M}	by {p.writer}	{names}	"
                   f"{'; '.join(p.reasons)[:120]}")


@repo_app.command("review")
def review_(repo: str, proposal: int, url: str = UrlOption, token: str = TokenOption) -> None:
    """One proposal: who sent it, why it waits, and each op's diff against the skill as served."""
    p = _run(lambda: _client(url, token).proposal(repo, proposal))
    typer.echo(f"proposal {p.id} ({p.status}) by {p.writer}, {p.created_at.isoformat()}")
    if p.origin:
        typer.echo(f"origin (as the writer claims): {p.origin.model_dump_json(exclude_none=True)}")
    for reason in p.reasons:
        typer.echo(f"waits: {reason}")
    for ch in p.changes:
        typer.echo(f"\n# op {ch.index}: {ch.op} {ch.skill_name or ''}" + (f" -> {ch.new_name}" if ch.new_name else ""))
        typer.echo(ch.diff or "(delete)" if ch.proposed is None else ch.diff or "(no change)")


def _decide(repo: str, proposal: int, approve: bool, note: str, url: str, token: str) -> None:
    p = _run(lambda: _client(url, token).decide(repo, proposal, approve, note or None))
    applied = [f"{v.skill_name} v{v.version}" for v in (p.result.verdicts if p.result else []) if v.status == "applied"]
    typer.echo(f"proposal {p.id} {p.status}" + (f": {', '.join(applied)}" if applied else ""))


@repo_app.command("approve")
def approve(repo: str, proposal: int, note: str = typer.Option("", "--note"),
            url: str = UrlOption, token: str = TokenOption) -> None:
    """Apply a pending proposal now (as this token's write; not the token that proposed it)."""
    _decide(repo, proposal, True, note, url, token)


@repo_app.command("reject")
def reject(repo: str, proposal: int, note: str = typer.Option("", "--note"),
           url: str = UrlOption, token: str = TokenOption) -> None:
    """Reject a pending proposal."""
    _decide(repo, proposal, False, note, url, token)


@repo_app.command("stats")
def stats(repo: str, source: list[str] = typer.Option(None, "--source", help="count only outcomes from caller, "
                                                                          "environment or judge (repeat)"),
          json_out: bool = typer.Option(False, "--json"), url: str = UrlOption, token: str = TokenOption) -> None:
    """Measured utility per skill: success when served vs when withheld at random, with a 95 % interval."""
    report = _run(lambda: _client(url, token).utility(repo, source or None))
    if json_out:
        print_json(report.model_dump(mode="json"))
        return
    states = {s.name: s.state for s in _run(lambda: _client(url, token).states(repo))}
    typer.echo(f"{'skill':<40} {'state':<9} {'served':>12} {'withheld':>12} {'difference':>11}  95 % interval")
    for u in report.skills:
        rate = lambda w, n: f"{w}/{n}" + (f" {w / n:4.0%}" if n else "     ")
        diff = f"{u.difference:+.2f}" if u.difference is not None else "-"
        ci = f"[{u.interval[0]:+.2f}, {u.interval[1]:+.2f}]" if u.interval else "(no task in an arm yet)"
        typer.echo(f"{u.name[:40]:<40} {states.get(u.name, 'active'):<9} {rate(u.served_success, u.served):>12} "
                   f"{rate(u.withheld_success, u.withheld):>12} {diff:>11}  {ci}")
    if not report.skills:
        typer.echo(f"no outcomes recorded for {repo} ({', '.join(report.sources)})")


@repo_app.command("states")
def states(repo: str, state: str = typer.Option(None, "--state", help="candidate, active or retired"),
           url: str = UrlOption, token: str = TokenOption) -> None:
    """Skills with a state of their own: candidates, retired ones, and those written from traffic."""
    rows = _run(lambda: _client(url, token).states(repo, state))
    for r in rows:
        typer.echo(f"{r.name}\t{r.state}\t{'traffic' if r.traffic else 'person'}\tby {r.updated_by}\t"
                   f"{r.updated_at:%Y-%m-%d %H:%M}\t{(r.reason or '')[:100]}")
    if not rows:
        typer.echo(f"every skill of {repo} is active")


def _set_state(repo: str, skill: str, state: str, note: str, url: str, token: str) -> None:
    r = _run(lambda: _client(url, token).set_state(repo, skill, state, note or None))
    typer.echo(f"{r.name}: {r.state}")


@repo_app.command("promote")
def promote(repo: str, skill: str, note: str = typer.Option("", "--note"),
            url: str = UrlOption, token: str = TokenOption) -> None:
    """Make a candidate (or a retired skill) active: served to every caller (an operator or a reviewer)."""
    _set_state(repo, skill, "active", note, url, token)


@repo_app.command("retire")
def retire(repo: str, skill: str, note: str = typer.Option("", "--note"),
           url: str = UrlOption, token: str = TokenOption) -> None:
    """Stop serving a skill, restorably (`skillos repo promote` brings it back)."""
    _set_state(repo, skill, "retired", note, url, token)


@repo_app.command("list")
def list_(url: str = UrlOption, token: str = TokenOption) -> None:
    """List repos."""
    for r in _run(lambda: _client(url, token).list_repos()):
        typer.echo(f"{r.name}\t{r.skill_count} skills\tseq {r.seq}"
                   + (f"\tforked from {r.forked_from}" if r.forked_from else ""))


@repo_app.command("fork")
def fork(source: str, name: str, snapshot: str = SnapshotOption,
         url: str = UrlOption, token: str = TokenOption) -> None:
    """Fork SOURCE (or its snapshot) into a new repo NAME."""
    print_json(_run(lambda: _client(url, token).fork_repo(source, name, snapshot)).model_dump(mode="json"))


@repo_app.command("put")
def put(repo: str, source: str = typer.Argument(..., help="a SKILL.md file, a skill folder, or - for stdin"),
        if_match: int = typer.Option(None, "--if-match", help="only if the skill is at this version"),
        url: str = UrlOption, token: str = TokenOption) -> None:
    """Create or replace a skill from a SKILL.md document."""
    text = _read(source)
    s = _run(lambda: _client(url, token).put_skill(repo, text, if_match=if_match))
    typer.echo(f"{s.name} version {s.version}" + (f" ({_examples_note(s.examples)})" if s.examples else ""))


@repo_app.command("get")
def get(repo: str, name: str, json_out: bool = typer.Option(False, "--json"),
        url: str = UrlOption, token: str = TokenOption) -> None:
    """Print a skill's SKILL.md document (or its JSON with --json, worked examples included); its worked
    examples' ids go to stderr."""
    c = _client(url, token)
    skill = _run(lambda: c.get_skill(repo, name))
    if json_out:
        print_json(skill.model_dump(mode="json"))
    else:
        typer.echo(skill.content, nl=False)  # the document alone on stdout: it can be piped or saved as it is
        if skill.examples:
            typer.echo(f"# {_examples_note(skill.examples)} (--json shows them)", err=True)


@repo_app.command("rm")
def rm(repo: str, name: str = typer.Argument(None, help="the skill; without it the whole repo goes"),
       url: str = UrlOption, token: str = TokenOption) -> None:
    """Delete a skill, or a whole repo."""
    c = _client(url, token)
    _run(lambda: c.delete_skill(repo, name) if name else c.delete_repo(repo))
    typer.echo(f"deleted {repo}/{name}" if name else f"deleted repo {repo}")


@repo_app.command("search")
def search(repo: str, query: str, k: int = KOption,
           mode: str = typer.Option("bm25", "--mode", help="bm25 (keywords) | dense (meaning) | hybrid (both)"),
           url: str = UrlOption, token: str = TokenOption) -> None:
    """Top-k skills for a query."""
    from skillos.protocol.skillrepo import SEARCH_MODES

    if mode not in SEARCH_MODES:
        fail(f"unknown mode {mode!r}: use {', '.join(SEARCH_MODES)}")
    for h in _run(lambda: _client(url, token).search(repo, query, k, mode)):
        typer.echo(f"{h.score:8.3f}  {h.name} (v{h.version})  {h.description}"
                   + (f"  [{len(h.examples)} examples]" if h.examples else ""))


@repo_app.command("ops")
def ops(repo: str, source: str = typer.Argument(..., help="JSON file (or -): a list of ops or {\"ops\": [...]} "
                                                          "(with \"example\": a worked example to keep)"),
        key: str = typer.Option(None, "--idempotency-key"),
        non_atomic: bool = typer.Option(False, "--non-atomic", help="apply the valid ops, refuse the rest"),
        url: str = UrlOption, token: str = TokenOption) -> None:
    """Apply curator function calls."""
    try:
        data = json.loads(_read(source))
    except json.JSONDecodeError as e:
        fail(f"not JSON: {e}")
    op_list = data.get("ops") if isinstance(data, dict) else data
    if not isinstance(op_list, list):
        fail("give a JSON list of ops or an object with an 'ops' list")
    example = data.get("example") if isinstance(data, dict) else None
    if example is not None and not isinstance(example, dict):
        fail("'example' must be a JSON object: a worked example (task, steps, ...)")
    print_json(_run(lambda: _client(url, token).apply_ops(repo, op_list, key, not non_atomic, example=example))
               .model_dump(mode="json"))


@repo_app.command("export")
def export(repo: str, out: Path = OutOption,
           url: str = UrlOption, token: str = TokenOption) -> None:
    """Download the repo as a tar.gz of <name>/SKILL.md folders."""
    data = _run(lambda: _client(url, token).export(repo))
    target = out or Path(f"{repo}.tar.gz")
    target.write_bytes(data)
    typer.echo(f"wrote {target} ({len(data)} bytes)")


@repo_app.command("import")
def import_(repo: str, source: Path = SourceArchiveArg,
            replace: bool = typer.Option(False, "--replace", help="delete skills not in the source"),
            create: bool = typer.Option(True, "--create/--no-create", help="create the repo if missing"),
            url: str = UrlOption, token: str = TokenOption) -> None:
    """Add skills from a tar.gz or a folder of skill folders."""
    from skillos.clients.skillrepo import SkillRepoError

    try:
        data = folder_archive(source) if source.is_dir() else source.read_bytes()
    except (FileNotFoundError, IsADirectoryError) as e:
        fail(str(e))
    c = _client(url, token)
    if create:
        try:
            c.create_repo(repo)
        except SkillRepoError as e:
            if e.code != "repo_exists":
                fail(f"{e.status} {e.code}: {e.message}")
    r = _run(lambda: c.import_(repo, data, replace=replace))
    typer.echo(f"imported {len(r.imported)} skills into {repo}: {', '.join(r.imported)}")


@repo_app.command("history")
def history(repo: str, name: str, url: str = UrlOption, token: str = TokenOption) -> None:
    """A skill's versions, newest first."""
    for v in _run(lambda: _client(url, token).skill_versions(repo, name)):
        typer.echo(f"v{v.version}\t{'deleted' if v.deleted else 'present'}\t{v.cause}\tseq {v.seq}\t"
                   f"{v.created_at.isoformat()}")


@repo_app.command("snapshot")
def snapshot(repo: str, label: str, url: str = UrlOption, token: str = TokenOption) -> None:
    """Remember the repo's current skills under LABEL."""
    print_json(_run(lambda: _client(url, token).snapshot(repo, label)).model_dump(mode="json"))


@repo_app.command("restore")
def restore(repo: str, label: str, url: str = UrlOption, token: str = TokenOption) -> None:
    """Make the repo's skills what they were at snapshot LABEL."""
    print_json(_run(lambda: _client(url, token).restore(repo, label)).model_dump(mode="json"))


def register(app: typer.Typer, serve_app: typer.Typer) -> None:
    serve_app.command("skillrepo")(serve_skillrepo)
    app.add_typer(repo_app, name="repo")
