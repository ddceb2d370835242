"""Chaos scenario 5 (issue 26): the executor under load.

    .venv/bin/python -m bench.chaos --scenario 5                           # 64 clients for 10 minutes (~12 min)
    .venv/bin/python -m bench.chaos --scenario 5 --clients 8 --duration-s 20   # the tests' short form

Real processes on loopback: SmolLM2-135M on llama-server (`skillos serve llm`, 4 slots), the skill repo
(SQLite, one repo of ``skills`` ALFWorld-like skills, bulk-imported) and the executor on its default settings.
``clients`` closed-loop clients (each sends its next request when the last is answered) for ``duration_s``:
half post `/v1/act` (an ALFWorld decision with the top-3 skills of the repo, a few past steps, the admissible
actions), half talk to the skill gateway (`/v1/chat/completions`, OpenAI's wire format): a call that opens a
trajectory (a skill search), then two that continue it (``X-SkillOS-Trajectory``), every fourth call streamed.

Checked: no 5xx and no transport error; no request takes the hang bound (``hang_s``, the clients' timeout);
every answer is in the one error shape when not a 200 (a 429 is allowed: the client waits its
Retry-After, as the OpenAI SDK does); the executor's RSS (VmRSS, sampled every 2 s) at the
end within 10 % of its level after warm-up (the sample at a fifth of the duration); no ``unhandled_error``
logged. Reported: requests and throughput per endpoint, p50 / p99 / max latency, the RSS curve's points.
With the LLM on the same two cores the latency is the LLM's queue: 64 clients wait behind 4 slots.
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.bench_gateway import fill_repo, first_messages, next_messages, rss_mb, task_text
from bench.chaos import ServeProcess, _pct

MODEL = "smollm2-135m-instruct"
REPO = "load"
PLACES = ["cabinet 1", "cabinet 2", "countertop 1", "drawer 1", "fridge 1", "microwave 1", "shelf 1", "sinkbasin 1"]
SAMPLE_S = 2.0


def act_body(i: int, rng: random.Random) -> dict:
    """An ALFWorld decision mid-episode: the task, 0-3 past steps, where the agent stands and what it can do."""
    past = rng.randint(0, 3)
    history = [{"observation": f"You arrive at {PLACES[j]}. On the {PLACES[j]}, you see a {rng.choice(['mug', 'apple', 'pen'])} {j + 1}.",
                "action": f"go to {PLACES[j + 1]}", "thought": "Not here; I try the next place."} for j in range(past)]
    here = PLACES[past]
    return {"env": "alfworld", "task": task_text(i), "repo": REPO, "k": 3, "history": history,
            "observation": f"You arrive at {here}. On the {here}, you see a mug 1 and a knife 2.",
            "first_observation": "You are in the middle of a room. Looking quickly around you, you see "
                                 + ", ".join(f"a {p}" for p in PLACES) + ".",
            "admissible_actions": [f"go to {p}" for p in PLACES if p != here]
            + [f"take mug 1 from {here}", f"take knife 2 from {here}", "look", "inventory"],
            "sampling": {"max_tokens": 24, "temperature": 0.7}, "seed": i}


class Load:
    """The closed-loop clients and what each request got."""

    def __init__(self, url: str, model: str, clients: int, duration_s: float, hang_s: float):
        self.url, self.model, self.clients, self.duration_s, self.hang_s = url, model, clients, duration_s, hang_s
        self.requests: list[dict] = []   # kind, start, end, status, code
        self.rss: list[tuple[float, float]] = []

    async def _one(self, c: httpx.AsyncClient, kind: str, fn) -> httpx.Response | None:
        start = time.monotonic()
        rec = {"kind": kind, "start": start, "status": 0, "code": None}
        try:
            r = await fn()
            rec["status"] = r.status_code
            if r.status_code != 200:
                try:
                    rec["code"] = r.json()["error"]["code"]
                except (ValueError, KeyError, TypeError):
                    rec["code"] = "not-the-error-shape"
            return r if r.status_code == 200 else None
        except httpx.TimeoutException:
            rec["status"], rec["code"] = -1, "hang"
        except httpx.HTTPError as e:
            rec["code"] = type(e).__name__
        finally:
            rec["end"] = time.monotonic()
            self.requests.append(rec)
            if rec["status"] in (429, 503):   # as the OpenAI SDK does: wait what the server asks, then go on
                rec["retry_after"] = r.headers.get("Retry-After")
                wait = float(rec["retry_after"]) if (rec["retry_after"] or "").isdigit() else 1.0
                await asyncio.sleep(min(wait, 10.0))
        return None

    async def _act_client(self, c: httpx.AsyncClient, k: int, deadline: float) -> None:
        rng, i = random.Random(k), k * 1_000_000
        while time.monotonic() < deadline:
            i += 1
            await self._one(c, "act", lambda i=i: c.post(f"{self.url}/v1/act", json=act_body(i, rng)))

    async def _gateway_client(self, c: httpx.AsyncClient, k: int, deadline: float) -> None:
        i, n = k * 1_000_000, 0
        while time.monotonic() < deadline:
            i += 1
            headers: dict[str, str] = {}
            for step, messages in enumerate((first_messages(i), next_messages(i), next_messages(i))):
                n += 1
                body = {"model": self.model, "messages": messages, "max_tokens": 16, "stream": n % 4 == 0}
                kind = ("chat-stream" if body["stream"] else "chat") + ("-new" if step == 0 else "")
                r = await self._one(c, kind, lambda b=body, h=dict(headers): self._chat(c, b, h))
                if r is None or time.monotonic() >= deadline:
                    break
                headers = {"X-SkillOS-Trajectory": r.headers.get("X-SkillOS-Trajectory", "")}

    async def _chat(self, c: httpx.AsyncClient, body: dict, headers: dict) -> httpx.Response:
        if not body["stream"]:
            return await c.post(f"{self.url}/v1/chat/completions", json=body, headers=headers)
        async with c.stream("POST", f"{self.url}/v1/chat/completions", json=body, headers=headers) as r:
            text = (await r.aread()).decode(errors="replace")
        if r.status_code == 200 and "data: [DONE]" not in text:
            raise httpx.RemoteProtocolError("stream ended without data: [DONE]")
        if r.status_code == 200 and '"error"' in text:   # a failure told inside the stream, its status line gone
            raise httpx.RemoteProtocolError(f"an error event in the stream: {text[text.find('error') - 2:][:200]}")
        return r

    async def _sample(self, pid: int, deadline: float) -> None:
        while time.monotonic() < deadline:
            self.rss.append((time.monotonic(), rss_mb(pid)))
            await asyncio.sleep(SAMPLE_S)
        self.rss.append((time.monotonic(), rss_mb(pid)))

    async def run(self, pid: int) -> float:
        begin = time.monotonic()
        deadline = begin + self.duration_s
        limits = httpx.Limits(max_connections=self.clients + 4, max_keepalive_connections=self.clients + 4)
        async with httpx.AsyncClient(timeout=self.hang_s, limits=limits) as c:
            await asyncio.gather(self._sample(pid, deadline),
                                 *(self._act_client(c, k, deadline) if k % 2 == 0 else self._gateway_client(c, k, deadline)
                                   for k in range(self.clients)))
        return begin


def executor_load(*, clients: int = 64, duration_s: float = 600.0, skills: int = 2000, hang_s: float = 300.0,
                  admission: bool = True, max_llm_calls: int | None = None, queue_s: float | None = None,
                  workdir: Path | None = None) -> dict:
    """``admission=False``: the executor's bound on LLM calls in flight lifted and never adapting (the code before
    it, measured);
    ``max_llm_calls`` / ``queue_s``: that bound's settings instead of the executor's defaults."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="skillos-chaos-load-"))
    procs: list[ServeProcess] = []
    try:
        llm = ServeProcess(["llm", "--model", MODEL], {"SKILLOS_LLM_PARALLEL": "4"}, workdir / "llm.log")
        repo = ServeProcess(["skillrepo"], {"SKILLOS_DENSE_SEARCH": "false",
                                            "SKILLOS_DATABASE_URL": f"sqlite:///{workdir / 'skills.db'}"},
                            workdir / "skillrepo.log")
        procs += [llm, repo]
        for p in procs:
            p.wait_healthy(300)
        fill_repo(repo.url, REPO, skills)
        # the executor on its defaults: only where things are
        executor = ServeProcess(["executor"], {
            "SKILLOS_SKILLREPO_URL": repo.url, "SKILLOS_EXECUTOR_LLM_BASE_URL": f"{llm.url}/v1",
            "SKILLOS_EXECUTOR_LLM_MODEL": MODEL, "SKILLOS_GATEWAY_DEFAULT_REPO": REPO,
            "SKILLOS_GATEWAY_DATABASE_URL": f"sqlite:///{workdir / 'gateway.db'}",
            "SKILLOS_CURATOR_URL": "http://127.0.0.1:9",
            **({} if admission else {"SKILLOS_EXECUTOR_MAX_LLM_CALLS": "1000000", "SKILLOS_EXECUTOR_LLM_TARGET_S": "1e9"}),
            **({"SKILLOS_EXECUTOR_MAX_LLM_CALLS": str(max_llm_calls)} if max_llm_calls else {}),
            **({"SKILLOS_EXECUTOR_LLM_QUEUE_S": str(queue_s)} if queue_s is not None else {})}, workdir / "executor.log")
        procs.append(executor)
        executor.wait_healthy(300)
        load = Load(executor.url, MODEL, clients, duration_s, hang_s)
        begin = asyncio.run(load.run(executor.proc.pid))
        end = time.monotonic()
        logs = executor.logs()
    finally:
        for p in reversed(procs):
            p.stop()

    reqs = load.requests
    by_kind: dict[str, list[float]] = {}
    for r in reqs:
        if r["status"] == 200:
            by_kind.setdefault(r["kind"], []).append(r["end"] - r["start"])
    warm = begin + duration_s / 5
    after = [mb for t, mb in load.rss if t >= warm][:3] or [load.rss[-1][1]]
    base = sum(after) / len(after)   # the level after warm-up: the mean of three samples, not one
    last, peak = load.rss[-1][1], max(mb for _, mb in load.rss)
    step = max(1, len(load.rss) // 10)
    return {
        "scenario": "executor_load", "clients": clients, "duration_s": duration_s, "skills": skills, "hang_s": hang_s,
        "admission": admission,
        "wall_s": round(end - begin, 1), "n": len(reqs),
        "statuses": dict(Counter(str(r["status"]) for r in reqs)),
        "codes": dict(Counter(f"{r['status']} {r['code']}" for r in reqs if r["status"] != 200)),
        "latency": {k: {"n": len(v), "per_s": round(len(v) / duration_s, 2), "p50_s": round(_pct(v, 50), 2),
                        "p99_s": round(_pct(v, 99), 2), "max_s": round(max(v), 2),
                        "refused": sum(1 for r in reqs if r["kind"] == k and r["status"] == 429)}
                    for k, v in sorted(by_kind.items())},
        "settings": {"max_llm_calls": max_llm_calls, "queue_s": queue_s},
        "slowest_s": round(max((r["end"] - r["start"] for r in reqs), default=0.0), 1),
        "rss_mb": {"start": round(load.rss[0][1], 1), "after_warmup": round(base, 1), "end": round(last, 1),
                   "max": round(peak, 1), "growth_pct": round(100 * (last - base) / base, 1),
                   "curve": [(round(t - begin), round(mb, 1)) for t, mb in load.rss[::step]]},
        "unhandled_errors_logged": logs.count('"unhandled_error"'),
    }


def load_invariants(r: dict) -> list[str]:
    """What scenario 5 must show; each broken invariant as a sentence (empty: all hold)."""
    bad = []
    five = {k: v for k, v in r["codes"].items() if k.startswith("5")}
    if five:
        bad.append(f"5xx answers: {five}")
    broken = {k: v for k, v in r["codes"].items() if k.startswith(("0 ", "-1 ")) or k.endswith("not-the-error-shape")}
    if broken:
        bad.append(f"hangs, transport errors or answers outside the error shape: {broken}")
    if not r["latency"]:
        bad.append("no request was answered")
    if abs(r["rss_mb"]["growth_pct"]) > 10:
        bad.append(f"the executor's RSS moved {r['rss_mb']['growth_pct']:+.1f} % after warm-up (bound 10 %)")
    if r["unhandled_errors_logged"]:
        bad.append(f"{r['unhandled_errors_logged']} unhandled_error lines in the executor's log")
    return bad


def _changed(r: dict) -> str:
    if not r["admission"]:
        return (" but its admission bound lifted (SKILLOS_EXECUTOR_MAX_LLM_CALLS=1000000, SKILLOS_EXECUTOR_LLM_TARGET_S=1e9: "
                "the code before it)")
    s = r.get("settings") or {}
    given = [f"SKILLOS_EXECUTOR_{k.upper()}={v}" for k, v in (("max_llm_calls", s.get("max_llm_calls")),
                                                               ("llm_queue_s", s.get("queue_s"))) if v is not None]
    return f" but {', '.join(given)}" if given else ""


def render_load(r: dict, command: str) -> str:
    bad = load_invariants(r)
    m = r["rss_mb"]
    rows = "\n".join(f"| {k} | {v['n']} | {v['refused']} | {v['per_s']} | {v['p50_s']} | {v['p99_s']} | {v['max_s']} |"
                     for k, v in r["latency"].items())
    lines = [
        "### Scenario 5: the executor under load\n",
        f"`{command}`\n",
        (f"* **Setup**: SmolLM2-135M on llama-server (4 slots), the skill repo (SQLite, {r['skills']:,} skills), the "
         f"executor on its default settings{_changed(r)}; {r['clients']} closed-loop clients for {r['duration_s']:.0f} s, half on "
         "`/v1/act`, half on the gateway's `/v1/chat/completions` (a new trajectory, then two calls continuing it; "
         "every fourth call streamed)."),
        (f"* **Answers**: {r['n']} requests: {json.dumps(r['statuses'])}; not 200: "
         f"{json.dumps(r['codes']) if r['codes'] else 'none'}; slowest {r['slowest_s']} s (hang bound {r['hang_s']:.0f} s).\n"),
        ("| endpoint | answered 200 | 429 (waited its Retry-After) | 200 per s | p50 s | p99 s | max s |\n"
         "|---|---|---|---|---|---|---|\n" + rows + "\n"),
        "(latencies of the 200s; a 429's client waits its Retry-After outside the timed request)\n",
        (f"* **Executor RSS** (MiB): {m['start']} at the start, {m['after_warmup']} after warm-up, {m['end']} at the "
         f"end ({m['growth_pct']:+.1f} %), max {m['max']}; curve (s, MiB): {m['curve']}."),
        f"* **Logged `unhandled_error`**: {r['unhandled_errors_logged']}.",
        "* **Verdict**: " + ("every invariant held." if not bad else "BROKEN: " + " ".join(bad)),
    ]
    return "\n".join(lines) + "\n"
