"""Chaos scenario 4 (issue 26): the LLM backend killed mid-episode and mid-curation.

    .venv/bin/python -m bench.chaos --scenario 4      # about 3-5 minutes on 2 cores

Real processes on loopback: the embedded SmolLM2 (`skillos serve llm`, llama-server under it), the skill repo
(SQLite), an ALFWorld server, the executor and the curator on that LLM. Two faults, each a SIGKILL to the LLM's
whole process group (a pod gone), then the LLM started again on the same port (the Service's address):

* **mid-episode**: ``clients`` streams post No Memory episodes one after another; the LLM is killed while
  episodes are in flight and started again ``down_s`` later. Checked: every answer is a 200 (an episode that
  lost its LLM ends ``llm_error`` with an error saying why) or the executor's 502 ``llm_unavailable`` for one
  that could not get a first completion; none hangs; an episode started after the LLM is back finishes
  normally (the executor recovers without a restart).
* **mid-curation**: ``curations`` concurrent curate calls (each with its own idempotency key) on a real
  trajectory, the LLM killed while they generate, then the same calls again once it is back. Checked against
  the repo's op log: a call that lost its LLM answered with ``error`` and no calls, and wrote nothing; every
  other call is one entry of the log with each op's fate as the answer says (the curator's batches are
  non-atomic by design, each call judged on its own: `skillos.curation.ATOMIC`); no write the answers do not
  account for.

That `skillos run` resumes its stream after such a stop is `harness.resume`'s, tested end to end by
tests/harness/test_resume.py (a real run SIGKILLed and resumed).
"""

from __future__ import annotations

import tempfile
import time
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from bench.chaos import NORMAL_ENDS, EpisodeLoad, ServeProcess, _pct, alfworld_data_dir
from skillos.net import free_port

MODEL = "smollm2-135m-instruct"
REPO = "chaos-llm"


def _llm(port: int, log: Path, parallel: int) -> ServeProcess:
    return ServeProcess(["llm", "--model", MODEL], {"SKILLOS_LLM_N_THREADS": "1", "SKILLOS_LLM_PARALLEL": str(parallel)},
                        log, port=port)


def _trajectory(executor_url: str, hang_s: float) -> dict:
    """A real episode's turns, for the curate calls (played before any fault)."""
    r = httpx.post(f"{executor_url}/v1/episodes", timeout=hang_s, json={
        "env": "alfworld", "split": "valid_seen", "index": 0, "max_turns": 3, "seed": 0,
        "sampling": {"max_tokens": 48}, "acting": {"demos_per_type": 0}})
    r.raise_for_status()
    body = r.json()
    return {"task": body.get("instruction") or "put a clean mug in the coffeemachine", "task_id": "chaos-0",
            "task_type": "clean", "env": "alfworld",
            "turns": [{"observation": t.get("observation", ""), "thought": t.get("thought", ""),
                       "action": t.get("action", "")} for t in body.get("turns", [])]}


def _curate(url: str, trajectory: dict, key: str, hang_s: float) -> dict:
    start = time.monotonic()
    try:
        r = httpx.post(f"{url}/v1/curate", timeout=hang_s, json={
            "trajectory": trajectory, "self_judged_success": False, "repo": REPO, "idempotency_key": key,
            "temperature": 0.7, "seed": zlib.crc32(key.encode()) % 1000})
    except httpx.TimeoutException:
        return {"key": key, "status": -1, "s": time.monotonic() - start, "error": "no answer within the hang bound"}
    except httpx.TransportError as e:
        return {"key": key, "status": 0, "s": time.monotonic() - start, "error": repr(e)}
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    out = {"key": key, "status": r.status_code, "s": round(time.monotonic() - start, 1)}
    if r.status_code == 200:
        out.update(error=body.get("error"), call_id=body.get("call_id"),
                   calls=len(body.get("calls", [])),
                   applied=sorted(c.get("skill_name") or "" for c in body.get("calls", []) if c.get("applied")))
    else:
        err = body.get("error") if isinstance(body.get("error"), dict) else {}
        out.update(code=err.get("code", "not-the-error-shape"), error=err.get("message", r.text[:300]))
    return out


def _busy(llm_url: str, at_least: int, within_s: float) -> int:
    """Wait until llama-server is generating for ``at_least`` requests (its own gauge, through the wrapper),
    at most ``within_s``; the count seen. A kill on a timer alone may find the work not started or done."""
    deadline, seen = time.monotonic() + within_s, 0
    while time.monotonic() < deadline:
        try:
            text = httpx.get(f"{llm_url}/metrics", timeout=5).text
            seen = int(float(next(line.split()[-1] for line in text.splitlines()
                                  if line.startswith("llamacpp:requests_processing"))))
        except (httpx.HTTPError, StopIteration, ValueError):
            seen = 0
        if seen >= at_least:
            return seen
        time.sleep(0.2)
    return seen


def _op_log(repo_url: str) -> list[dict]:
    entries, before = [], None
    with httpx.Client(base_url=repo_url, timeout=30) as h:
        while True:
            page = h.get(f"/v1/repos/{REPO}/ops", params={"limit": 200, **({"before": before} if before else {})}).json()
            entries += page["entries"]
            before = page.get("next_before")
            if not before:
                return entries


def llm_loss(*, clients: int = 4, max_turns: int = 4, max_tokens: int = 48, warmup_s: float = 20.0,
             down_s: float = 5.0, after_s: float = 20.0, curations: int = 3, curator_max_tokens: int = 160,
             hang_s: float = 300.0, workdir: Path | None = None, alfworld_data: Path | None = None) -> dict:
    workdir = workdir or Path(tempfile.mkdtemp(prefix="skillos-chaos-llm-"))
    data = alfworld_data_dir(alfworld_data)
    llm_port = free_port()
    parallel = max(clients, curations)
    procs: list[ServeProcess] = []
    llm = _llm(llm_port, workdir / "llm-1.log", parallel)
    try:
        procs.append(llm)
        repo = ServeProcess(["skillrepo"], {"SKILLOS_DENSE_SEARCH": "false",
                                            "SKILLOS_DATABASE_URL": f"sqlite:///{workdir / 'skills.db'}"},
                            workdir / "skillrepo.log")
        env = ServeProcess(["alfworld"], {"SKILLOS_ALFWORLD_DATA": str(data), "SKILLOS_ALFWORLD_SPARE_WORKERS": "1"},
                           workdir / "alfworld.log")
        llm_env = {"BASE_URL": f"{llm.url}/v1", "MODEL": MODEL, "TIMEOUT_S": str(hang_s), "MAX_RETRIES": "0"}
        executor = ServeProcess(["executor"], {
            "SKILLOS_ALFWORLD_URL": env.url, "SKILLOS_SKILLREPO_URL": repo.url,
            "SKILLOS_EXECUTOR_MAX_CONCURRENT_EPISODES": str(max(8, clients)),
            **{f"SKILLOS_EXECUTOR_LLM_{k}": v for k, v in llm_env.items()},
            **{f"SKILLOS_JUDGE_LLM_{k}": v for k, v in llm_env.items()}}, workdir / "executor.log")
        curator = ServeProcess(["curator"], {"SKILLOS_SKILLREPO_URL": repo.url,
                                             # SmolLM2 rambles to the budget: a short one keeps the calls short
                                             "SKILLOS_CURATOR_MAX_TOKENS": str(curator_max_tokens),
                                             **{f"SKILLOS_CURATOR_LLM_{k}": v for k, v in llm_env.items()}},
                               workdir / "curator.log")
        procs += [repo, env, executor, curator]
        for p in procs:
            p.wait_healthy(300)
        httpx.post(f"{repo.url}/v1/repos", json={"name": REPO}, timeout=30).raise_for_status()
        n_tasks = httpx.get(f"{env.url}/v1/tasks", params={"split": "valid_seen"}, timeout=60).json()["count"]
        trajectory = _trajectory(executor.url, hang_s)

        # --- the LLM killed mid-episode ---
        marks = {"begin": time.monotonic()}
        load = EpisodeLoad(executor.url, clients, n_tasks, max_turns, max_tokens, hang_s)
        time.sleep(warmup_s)
        _busy(llm.url, 1, 120)
        marks["kill"] = llm.kill()
        time.sleep(down_s)
        llm = _llm(llm_port, workdir / "llm-2.log", parallel)
        procs[0] = llm
        llm.wait_healthy(300)
        marks["back"] = time.monotonic()
        time.sleep(after_s)
        load.wait_answered_after(marks["back"])   # an episode started after the LLM came back
        still_running = load.stop()
        marks["episodes_end"] = time.monotonic()
        episodes = load.episodes

        # --- the LLM killed mid-curation ---
        with ThreadPoolExecutor(curations) as pool:
            cut = [pool.submit(_curate, curator.url, trajectory, f"cut-{i}", hang_s) for i in range(curations)]
            _busy(llm.url, curations, 120)   # every call is at its LLM
            marks["curation_kill"] = llm.kill()
            cut = [f.result() for f in cut]
        llm = _llm(llm_port, workdir / "llm-3.log", parallel)
        procs[0] = llm
        llm.wait_healthy(300)
        with ThreadPoolExecutor(curations) as pool:
            again = list(pool.map(lambda i: _curate(curator.url, trajectory, f"again-{i}", hang_s), range(curations)))
        log = _op_log(repo.url)
        logs = executor.logs() + curator.logs()
    finally:
        for p in reversed(procs):
            p.stop()

    rel = lambda x: round(x - marks["begin"], 1)
    kill, back = marks["kill"], marks["back"]
    in_flight = [e for e in episodes if e.start < kill < e.end]
    after = [e for e in episodes if e.start >= back]
    durations = [e.end - e.start for e in episodes]
    by_key: dict[str, list[dict]] = {}
    for entry in log:
        if entry.get("idempotency_key"):
            by_key.setdefault(entry["idempotency_key"], []).append(entry)
    return {
        "scenario": "llm_loss", "clients": clients, "max_turns": max_turns, "max_tokens": max_tokens,
        "warmup_s": warmup_s, "down_s": down_s, "after_s": after_s, "hang_s": hang_s, "curations": curations,
        "kill_at_s": rel(kill), "back_at_s": rel(back), "episodes_end_at_s": rel(marks["episodes_end"]),
        "clients_still_running": still_running,
        "episodes": [vars(e) | {"start": rel(e.start), "end": rel(e.end)} for e in episodes],
        "n": len(episodes), "statuses": dict(Counter(e.status for e in episodes)),
        "stop_reasons": dict(Counter(e.stop_reason for e in episodes if e.status == 200)),
        "in_flight_at_kill": len(in_flight),
        "in_flight_outcomes": dict(Counter(e.stop_reason if e.status == 200 else f"HTTP {e.status} {e.code}"
                                           for e in in_flight)),
        "llm_errors": sorted({(e.error or "")[:160] for e in episodes if e.stop_reason == "llm_error"})[:3],
        "after_back": len(after), "after_back_finished": sum(1 for e in after if e.status == 200
                                                             and e.stop_reason in NORMAL_ENDS),
        "max_s": round(max(durations), 1) if durations else 0.0,
        "p50_s": round(_pct(durations, 50), 1) if durations else None,
        "curations_cut": cut, "curations_again": again,
        "op_log": {k: [{"kind": e["kind"], "applied": e["applied"],
                        "ops": [(o["name"], o["status"], o.get("skill_name")) for o in e["ops"]]} for e in v]
                   for k, v in by_key.items()},
        "op_log_unkeyed": sum(1 for e in log if not e.get("idempotency_key")),
        "unhandled_errors_logged": logs.count('"unhandled_error"'),
    }


def llm_invariants(r: dict) -> list[str]:
    """What scenario 4 must show; each broken invariant as a sentence (empty: all hold)."""
    bad = []
    eps = r["episodes"]
    wrong = [e for e in eps if e["status"] != 200 and not (e["status"] == 502 and e["code"] == "llm_unavailable")]
    if wrong:
        bad.append(f"{len(wrong)} episode answers neither 200 nor 502 llm_unavailable: "
                   f"{Counter((e['status'], e['code']) for e in wrong)}; first: {wrong[0]['error']!r:.200}")
    if r["max_s"] >= r["hang_s"] or r["clients_still_running"]:
        bad.append(f"an episode hung (slowest {r['max_s']} s, bound {r['hang_s']} s)")
    if r["in_flight_at_kill"] < 1:
        bad.append("no episode was in flight when the LLM was killed (the fault missed the work)")
    if any(not (e.get("error") or "").strip() for e in eps if e["stop_reason"] == "llm_error"):
        bad.append("an llm_error episode without an error saying why")
    odd = Counter(e["stop_reason"] for e in eps if e["status"] == 200 and e["stop_reason"] not in (*NORMAL_ENDS, "llm_error"))
    if odd:
        bad.append(f"episodes ended for another reason: {dict(odd)}")
    late = [e for e in eps if e["start"] >= r["back_at_s"] and (e["status"] != 200 or e["stop_reason"] not in NORMAL_ENDS)]
    if late:
        bad.append(f"{len(late)} episodes started after the LLM was back did not finish normally: "
                   f"{Counter((e['status'], e['stop_reason']) for e in late)}")
    if r["after_back_finished"] < 1:
        bad.append("no episode started after the LLM was back finished (the executor did not recover)")
    for call in r["curations_cut"] + r["curations_again"]:
        entries = r["op_log"].get(call["key"], [])
        if call["status"] != 200:
            bad.append(f"curate {call['key']}: HTTP {call['status']} {call.get('code')} ({call.get('error')!r:.120}); "
                       "a lost LLM is an answer with error, not a failed call")
            continue
        if call["error"]:
            if call["calls"] or entries:
                bad.append(f"curate {call['key']} lost its LLM but has {call['calls']} calls and {len(entries)} "
                           "op-log entries")
            continue
        if len(entries) > 1:
            bad.append(f"curate {call['key']}: {len(entries)} op-log entries for one batch")
        # per op, not the entry's flag: the curator sends its batch non-atomically by design (each call judged
        # on its own, r_fc; `skillos.curation.ATOMIC`), so an entry with a refused op is applied=false
        logged = sorted(o[2] or "" for e in entries for o in e["ops"] if o[1] == "applied")
        if logged != call["applied"]:
            bad.append(f"curate {call['key']}: the answer applied {call['applied']}, the op log {logged}")
    if not any(c["status"] == 200 and c["error"] for c in r["curations_cut"]):
        bad.append("no curate call lost its LLM (the kill missed the curation)")
    if not any(c["status"] == 200 and not c["error"] for c in r["curations_again"]):
        bad.append("no curate call succeeded after the LLM was back")
    if r["op_log_unkeyed"]:
        bad.append(f"{r['op_log_unkeyed']} op-log entries no curate call accounts for")
    if r["unhandled_errors_logged"]:
        bad.append(f"{r['unhandled_errors_logged']} unhandled_error lines in the executor's and curator's logs")
    return bad


def render_llm(r: dict, command: str) -> str:
    bad = llm_invariants(r)
    fmt = lambda c: ", ".join(f"{n} × {k}" for k, n in sorted(c.items(), key=lambda kv: -kv[1])) or "none"
    calls = lambda cs: "; ".join(f"{c['key']}: " + (f"HTTP {c['status']}" if c["status"] != 200 else
                                                   (f"error `{str(c['error'])[:80]}`" if c["error"] else
                                                    f"{c['calls']} calls, applied {c['applied'] or '-'}"))
                                 for c in cs)
    lines = [
        "### Scenario 4: the LLM backend killed mid-episode and mid-curation\n",
        f"`{command}`\n",
        ("* **Setup**: the embedded SmolLM2-135M (`skillos serve llm`, llama-server, 1 thread), the skill repo "
         "(SQLite), ALFWorld, the executor and the curator on it (LLM timeout = the hang bound, no retries); each "
         "fault a SIGKILL to the LLM's process group, then a new LLM process on the same port."),
        (f"* **Mid-episode**: {r['clients']} clients posting No Memory episodes (`max_turns` {r['max_turns']}); the LLM "
         f"killed at {r['kill_at_s']} s with {r['in_flight_at_kill']} in flight, back at {r['back_at_s']} s. "
         f"{r['n']} episodes answered (p50 {r['p50_s']} s, slowest {r['max_s']} s): statuses "
         f"{fmt({('HTTP ' + str(k)): v for k, v in r['statuses'].items()})}; stop reasons {fmt(r['stop_reasons'])}. "
         f"In flight at the kill: {fmt(r['in_flight_outcomes'])}; they say why: "
         f"{'; '.join(f'`{x[:100]}`' for x in r['llm_errors'][:1]) or '-'}. Started after the LLM was back: "
         f"{r['after_back']}, finished normally {r['after_back_finished']}."),
        f"* **Mid-curation**, {r['curations']} calls cut by the kill: {calls(r['curations_cut'])}.",
        f"* **Again once it was back**: {calls(r['curations_again'])}.",
        (f"* **Op log**: {sum(len(v) for v in r['op_log'].values())} entries, one per answered call, each op's fate as "
         f"its answer says; "
         f"{r['op_log_unkeyed']} no call accounts for. `unhandled_error` lines logged: {r['unhandled_errors_logged']}."),
        "* **Verdict**: " + ("every invariant held." if not bad else "BROKEN: " + " ".join(bad)),
    ]
    return "\n".join(lines) + "\n"
