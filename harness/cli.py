"""`skillos up`, `skillos down` and `skillos run` (the main job).

Imports inside the commands are deliberate: every part's cli.py is loaded whenever any `skillos` command
starts (registration), so what only one command needs stays in it: the stack, the runner and the methods (pydantic-settings, the clients, matplotlib for the report).
"""

from __future__ import annotations

import signal
from pathlib import Path

import typer

OutOption = typer.Option(None, "--out", help="report folder (default: runs/<timestamp>)")


def _raise_interrupt(*_) -> None:
    raise KeyboardInterrupt


def up(envs: str = typer.Option("alfworld,webshop,reasoning", "--envs",
                                help="comma-separated env servers to start"),
       detach: bool = typer.Option(False, "--detach", "-d",
                                   help="start, print the URLs and return (stop with `skillos down`)"),
       llm_url: str = typer.Option(None, "--llm-url", help="use this OpenAI-compatible base URL (e.g. vLLM's "
                                   "http://host:8000/v1) instead of starting the embedded LLM"),
       port_offset: int = typer.Option(0, "--port-offset", help="add this to every default port"),
       with_console: bool = typer.Option(True, "--console/--no-console",
                                    help="also start the web console (runs from ./runs)"),
       timeout: float = typer.Option(600.0, "--timeout", help="seconds to wait for every service")) -> None:
    """Start the whole embedded stack (skill repo on SQLite, env servers, embedded LLM, executor,
    curator) as local processes; Ctrl-C stops it."""
    import signal
    import time

    from rich.console import Console

    from harness.stack import Stack, running_stack
    from skillos.cli.common import fail

    console = Console(stderr=True)
    if running_stack():
        fail("a stack is already running (see .skillos/stack.json); stop it with `skillos down`")
    try:
        stack = Stack(tuple(e.strip() for e in envs.split(",") if e.strip()), llm_url=llm_url,
                      port_offset=port_offset, console=with_console)
    except ValueError as e:
        fail(str(e))
    with console.status("starting the stack…"):
        try:
            state = stack.start(timeout=timeout, on_progress=lambda n: console.log(f"{n} is up"))
        except RuntimeError as e:
            fail(str(e))
    for name, info in state.services.items():
        console.print(f"  {name:<10} {info.url}  (pid {info.pid}, log {info.log})")
    for role, llm in state.role_llms.items():
        console.print(f"  {role:<10} LLM {llm['model']} at {llm['base_url']}")
    if state.url("console"):
        console.print(f"open the console: [bold]{state.url('console')}[/bold]")
    console.print(f"state file: {stack.state_path}")
    if detach:
        return
    console.print("stack running; Ctrl-C to stop")
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    try:
        while not stopping:
            dead = [n for n, p in stack.procs.items() if p.poll() is not None]
            if dead:
                console.print(f"[red]{', '.join(dead)} exited; stopping the stack[/red]")
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    console.print("stopping…")
    stack.stop()


def down() -> None:
    """Stop the stack started by `skillos up`."""
    from harness.stack import StackState, stack_dir, stop_state

    path = stack_dir() / "stack.json"
    state = StackState.load(path)
    if state is None:
        typer.echo("no stack is running (no state file)")
        return
    stopped = stop_state(state, path)
    typer.echo(f"stopped: {', '.join(stopped) or 'nothing was running'}")


def methods_cmd() -> None:
    """The methods `skillos run --method` plays, with their parameters (`--param KEY=VALUE`) and defaults."""
    import sys

    from skillos.methods import METHODS

    for name, cls in METHODS.items():
        lead = " ".join((sys.modules[cls.__module__].__doc__ or "").split("\n\n")[0].split())
        typer.echo(f"{name}  ({cls.title})  {lead[:150] + ('…' if len(lead) > 150 else '')}")
        for field, info in cls.Params.model_fields.items():
            typer.echo(f"    {field} = {info.default!r}  {info.description or ''}".rstrip())


# what a resumed run takes from its folder: given with --resume they are refused, not silently dropped
RUN_SHAPE = ("env", "split", "method", "param", "from_repo", "baseline", "limit", "task_type", "per_type", "seeds",
             "order", "k", "retrieval", "max_turns", "history_len", "acting", "oracle_judge", "baseline_from",
             "assume_same_code")


def _on_command_line(ctx: typer.Context, name: str) -> bool:
    # by name: typer carries its own copy of click, whose ParameterSource is not click's
    return getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"


def run(ctx: typer.Context,
        env: str = typer.Option("alfworld", "--env", help="alfworld | webshop | reasoning"),
        split: str = typer.Option(None, "--split",
                                  help="default: alfworld valid_seen, else test, else the first split"),
        method: str = typer.Option("skillos", "--method", help=(
            "one method or several, comma-separated, played on the same tasks: none (No Memory) | skillos | "
            "skillrl | sapo | skill1 | reasoningbank | memp | gold | skillos-expert | expert-demos (No Memory shown "
            "the handcoded expert's games of the task's type: the ceiling arm) (docs/methods.md)")),
        param: list[str] = typer.Option([], "--param", help=(
            "a method's parameter, KEY=VALUE (to every method that has it) or METHOD.KEY=VALUE; repeat it "
            "(e.g. --param sapo.promote_every=3); `skillos methods` lists them")),
        from_repo: str = typer.Option(None, "--from-repo", help=(
            "start every stream's repo as a fork of this repo (a skill library to start from) instead of empty")),
        baseline: bool = typer.Option(True, "--baseline/--no-baseline",
                                      help="also play the No Memory baseline on the same tasks"),
        baseline_from: Path = typer.Option(None, "--baseline-from", help=(
            "take the No Memory episodes from this earlier run folder where it played the same task and seed "
            "with the same executor settings (checked), and play only the rest (harness/reuse.py)")),
        assume_same_code: bool = typer.Option(False, "--assume-same-executor-code", help=(
            "with --baseline-from: also take episodes whose records carry no fingerprint of the executor's code "
            "(runs from before it was recorded); say so where you report them")),
        limit: int = typer.Option(None, "--limit", help="first N tasks of the split (default: all)"),
        task_type: str = typer.Option(None, "--task-type", help=(
            "only tasks of these types, comma-separated (ALFWorld: pick,clean; reasoning: gsm_symbolic,chain_sum)")),
        per_type: int = typer.Option(None, "--per-type", min=1,
                                     help="the first N tasks of each type (a balanced sample)"),
        seeds: int = typer.Option(3, "--seeds", min=1),
        order: str = typer.Option("grouped", "--order", help="grouped | shuffled"),
        concurrency: int = typer.Option(1, "--concurrency", min=1, help="episodes in flight at once"),
        out: Path = OutOption,
        resume: Path = typer.Option(None, "--resume", help=(
            "play on in this earlier run's folder from its last finished tasks, with the options it was started "
            "with (--concurrency and where the services are may be given again)")),
        hold: str = typer.Option(None, "--hold", help=(
            "with --resume: methods whose streams are not played on this time, comma-separated; they keep the "
            "episodes they finished and play on at a later --resume without --hold (the run is left 'held')")),
        new_executor_code: bool = typer.Option(False, "--new-executor-code", help=(
            "with --resume: play on although this checkout's executor code differs from the one the run's episodes "
            "were played with (refused otherwise: the arms would not be comparable)")),
        k: int = typer.Option(5, "--k", min=0, help="skills retrieved per task"),
        retrieval: str = typer.Option("bm25", "--retrieval",
                                      help="how skills are searched: bm25 (the paper's) | dense | hybrid"),
        max_turns: int = typer.Option(30, "--max-turns", min=1),
        history_len: int = typer.Option(30, "--history-len", min=0,
                                         help="past steps shown in full (paper: 3; older ones as actions)"),
        acting: list[str] = typer.Option([], "--acting", help=(
            "how the executor decides, KEY=VALUE, repeatable: state_line, hold_back (true|false), demos "
            "(none|generic|expert), demos_per_type (0-3), examples (worked examples of the retrieved skills shown, "
            "0-3), examples_chars; with --acting the ones not given take their defaults (the paper's setting: no "
            "expert demonstration, the skills' own examples)")),
        oracle_judge: bool = typer.Option(False, "--oracle-judge",
                                          help="give the curator the env's verdict instead of the self-judge"),
        start: bool = typer.Option(True, "--start/--no-start",
                                   help="start an embedded stack when none is running"),
        skillrepo_url: str = typer.Option(None, "--skillrepo-url"),
        executor_url: str = typer.Option(None, "--executor-url"),
        curator_url: str = typer.Option(None, "--curator-url"),
        env_url: str = typer.Option(None, "--env-url")) -> None:
    """Play a task stream with a self-evolving agent and write a report (plots, summary, skills)."""
    import asyncio
    import dataclasses
    import os
    import time

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from harness.attach import env_problems, free_port_offset, llm_problems
    from harness.resume import ResumeError
    from harness.reuse import check_baseline_folder, executor_code, played_with
    from harness.runner import held_methods, resumed_options, run_job, run_options
    from harness.stack import Stack, healthy, running_stack, stack_dir
    from skillos.cli.common import fail
    from skillos.methods import METHODS
    from skillos.protocol.runs import RunFolder
    from skillos.settings import StackSettings

    console = Console(stderr=True)
    try:
        if resume is not None:
            given = [f"--{name.replace('_', '-')}" for name in RUN_SHAPE if _on_command_line(ctx, name)]
            if given:
                fail(f"--resume plays on with the options the run was started with; drop {', '.join(given)}")
            if out is not None and out.resolve() != resume.resolve():
                fail("--resume plays on in the folder it names; drop --out")
            opts = resumed_options(resume)
            played = played_with(resume)
            if played and executor_code() not in played and not new_executor_code:
                fail(f"--resume {resume}: its episodes were played by executor code {', '.join(sorted(played))} "
                     f"(skillos/acting, services/executor), this checkout's is {executor_code()}: the rest would not "
                     "be comparable with them. Play on from a checkout of the commit the run was started or last "
                     "resumed at (git worktree add --detach ../run COMMIT; cd ../run; PYTHONPATH=$PWD "
                     "../main/.venv/bin/skillos up / run --resume ...), or pass --new-executor-code to mix them "
                     "(each record keeps its fingerprint)")
            if _on_command_line(ctx, "concurrency"):
                opts = dataclasses.replace(opts, concurrency=concurrency)
            if hold:
                opts = dataclasses.replace(opts, hold=held_methods(opts.methods, hold))
            env, split = opts.env, opts.split
            console.print(f"resuming {resume}: {'+'.join(opts.methods)} on {env}/{split}, with the options it was started with"
                          + (f"; holding {', '.join(opts.hold)}" if opts.hold else ""))
        else:
            if hold:
                fail("--hold goes with --resume: it pauses streams of a run that has started")
            opts = run_options(env=env, split=split, method=method, param=param, baseline=baseline,
                               from_repo=from_repo, limit=limit, task_type=task_type, per_type=per_type, seeds=seeds,
                               order=order, concurrency=concurrency, k=k, retrieval=retrieval, max_turns=max_turns,
                               history_len=history_len, acting=acting, oracle_judge=oracle_judge,
                               baseline_from=baseline_from, assume_same_code=assume_same_code)
            if baseline_from is not None:
                check_baseline_folder(baseline_from)
                if out is not None and out.resolve() == baseline_from.resolve():
                    fail("--out is the --baseline-from folder: a new run would empty it; write the run elsewhere")
    except ResumeError as e:
        fail(f"--resume {resume}: {e}")
    except ValueError as e:
        fail(str(e))
    methods = opts.methods
    settings = StackSettings()
    urls = {"skillrepo": skillrepo_url or settings.skillrepo_url,
            "executor": executor_url or settings.executor_url,
            "curator": curator_url or settings.curator_url,
            "env": env_url or settings.env_url(env)}
    stack = None
    # kill, a CI timeout or a container stop sends SIGTERM: stop the stack this run started, as on Ctrl-C
    signal.signal(signal.SIGTERM, _raise_interrupt)
    state = running_stack()
    explicit = any((skillrepo_url, executor_url, curator_url, env_url))
    start_own = False
    if state and not explicit and state.url(env):
        found = env_problems(state.url(env), env, split, settings.api_token or None) + llm_problems(state)
        if not found:
            urls = {"skillrepo": state.url("skillrepo"), "executor": state.url("executor"),
                    "curator": state.url("curator"), "env": state.url(env)}
            console.print("using the running stack (.skillos/stack.json)")
        else:
            console.print("[yellow]the running stack (.skillos/stack.json) does not serve what was asked:[/yellow]")
            for problem in found:
                console.print(f"  - {problem}")
            console.print("starting a separate stack on free ports for this run")
            start_own = True
    else:
        needed = ["executor", "env"] + (["skillrepo"] if any(METHODS[m].uses_repo for m in methods) else []) \
            + (["curator"] if any(METHODS[m].uses_curator for m in methods) else [])
        down = [n for n in needed if not healthy(urls[n])]
        if down and not start:
            fail(f"not reachable: {', '.join(f'{n} at {urls[n]}' for n in down)}; "
                 "start them (`skillos up`) or drop --no-start")
        if not down:
            found = env_problems(urls["env"], env, split, settings.api_token or None)
            if found and explicit:
                fail("the services given do not serve what was asked:\n  - " + "\n  - ".join(found))
            if found:
                console.print("[yellow]the services at the configured URLs do not serve what was asked:[/yellow]")
                for problem in found:
                    console.print(f"  - {problem}")
                start_own = True
        start_own = start_own or bool(down)
    if start_own:
        try:
            offset = free_port_offset(["llm", "skillrepo", env, "executor", "curator"], start=0)
            stack = Stack((env,), port_offset=offset,
                          directory=stack_dir() / f"run-{os.getpid()}" if offset else None)
        except (ValueError, RuntimeError) as e:
            fail(str(e))
        with console.status(f"starting a stack ({', '.join(stack.names)})…"):
            try:
                state = stack.start(on_progress=lambda n: console.log(f"{n} is up"))
            except RuntimeError as e:
                fail(str(e))
        urls = {"skillrepo": state.url("skillrepo"), "executor": state.url("executor"),
                "curator": state.url("curator"), "env": state.url(env)}
    console_url = (state.url("console") if state else None) or settings.console_url
    # where the services are is known now; the report folder's default is named by the time the run starts
    opts = dataclasses.replace(opts, out=resume or out or Path("runs") / time.strftime("%Y%m%d-%H%M%S"), urls=urls,
                               token=settings.api_token or None,
                               llms=state.role_llms if state and state.url("executor") == urls["executor"] else {})
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("{task.fields[last]}"), console=console)
    bar = {}

    def started(total: int, finished: int) -> None:
        bar["id"] = progress.add_task(f"{env}/{opts.split} {'+'.join(methods)}", total=total, completed=finished,
                                      last=f"{finished} finished before" if finished else "")

    def done(m: str, r) -> None:
        mark = "[green]✓[/green]" if r.success else "[red]✗[/red]"
        ops = f" ops {sum(o.applied for o in r.ops)}/{len(r.ops)}" if m == "skillos" else (
            f" repo {r.repo_size}" if r.repo_size is not None else "")
        err = f" [yellow]{(r.error or r.curator_error or '')[:60]}[/yellow]" if (r.error or r.curator_error) else ""
        progress.update(bar["id"], advance=1,
                        last=f"{m} #{r.position + 1} {r.task_type} {mark} {r.steps} steps{ops}{err}")

    if out is None and resume is None and healthy(console_url, timeout=0.5):
        console.print(f"follow the run in the console: {console_url}/runs/{opts.out.name}")
    try:
        with progress:
            folder, _ = asyncio.run(run_job(opts, on_task=done, on_start=started))
    except Exception as e:  # noqa: BLE001 - the job failed as a whole: say why, exit non-zero
        fail(f"run failed: {type(e).__name__}: {e}")
    finally:
        if stack is not None:
            with console.status("stopping the stack…"):
                stack.stop()
    console.print(RunFolder(folder).summary_md.read_text())
    console.print(f"report: {folder}")
    if opts.hold:
        console.print(f"held: {', '.join(opts.hold)}; `skillos run --resume {folder}` without --hold plays them on")


def eval_curator(
        config: Path = typer.Option(..., "--config", help="the training config (configs/train/*-served.yaml): "
                                    "model, env, reward weights, sampling"),
        adapter: Path = typer.Option(..., "--adapter", help="an adapter.gguf, a folder holding one, or a "
                                     "training run folder (its latest adapters/step-*)"),
        split: str = typer.Option("valid", "--split", help="the env split whose groups both arms play "
                                  "(never the one trained on)"),
        groups: int = typer.Option(8, "--groups", min=1, help="groups to play (the first N of the split's)"),
        rollouts: int = typer.Option(2, "--rollouts", min=1, help="rollouts per group and arm"),
        overrides: list[str] = typer.Option([], "--set", help="KEY=VALUE over the config, as `skillos train`"),
        out: Path = typer.Option(..., "--out", help="report folder; a rerun of the same command resumes in it"),
        untrained_from: Path | None = typer.Option(None, "--untrained-from", help="an earlier --out of the same "
                                                   "plan with another adapter: its untrained arm is reused, "
                                                   "not played again")) -> None:
    """The trained curator against the untrained one on held-out groups: the training loop's rollouts
    without an update, same groups, seeds and frozen executor, the adapter the only difference. Needs the
    stack (`skillos up --envs <env>`); writes eval.jsonl, eval.json and eval.md."""
    import shlex
    import sys

    from harness.curator_eval import EvalError, EvalPlan, evaluate, find_adapter
    from services.trainer.config import TrainConfig
    from services.trainer.settings import TrainerSettings
    from skillos.cli.common import fail, init_logging

    try:
        # the split's own groups, never a groups file the config may name (those are training groups)
        cfg = TrainConfig.from_options(config, None, None, [*overrides, f"data.split={split}", "data.groups_file=null"])
        plan = EvalPlan(cfg, find_adapter(adapter), split, groups, rollouts, out, untrained_from)
    except FileNotFoundError as e:
        fail(str(e))
    except ValueError as e:   # pydantic's ValidationError and EvalError too
        fail(f"{config}: {e}" if not isinstance(e, EvalError) else str(e))
    settings = TrainerSettings()
    init_logging(settings)
    command = "skillos " + shlex.join(sys.argv[1:])
    try:
        summary = evaluate(plan, settings, command)
    except ValueError as e:   # EvalError, or a config the served policy cannot be built from
        fail(str(e))
    typer.echo((out / "eval.md").read_text())
    if not summary["groups"]:
        fail("no group was completed by both arms (see eval.jsonl)")


def register(app: typer.Typer, serve_app: typer.Typer) -> None:
    app.command("eval-curator")(eval_curator)
    app.command("up")(up)
    app.command("down")(down)
    app.command("methods")(methods_cmd)
    app.command("run")(run)
