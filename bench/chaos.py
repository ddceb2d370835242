"""Chaos suite (issue 26): faults injected into real processes in the middle of real work.

    .venv/bin/python -m bench.chaos                       # scenarios 1 and 2 in full (about 2 minutes)
    .venv/bin/python -m bench.chaos --scenario 1          # one of them
    .venv/bin/python -m bench.chaos --scenario 3          # an env replica killed mid-episode (about 2 minutes)
    .venv/bin/python -m bench.chaos --scenario 4          # the LLM killed mid-episode and mid-curation (3-5 min)
    .venv/bin/python -m bench.chaos --scenario 5          # the executor under load: 64 clients, 10 minutes
    .venv/bin/python -m bench.chaos --scenario 6          # a million skills (about 30 min; --skills N for fewer)
    .venv/bin/python -m bench.chaos --append bench/RESULTS-reliability.md   # and add the section there

Everything is real: `skillos serve skillrepo` processes, a PostgreSQL cluster and a Redis server of the suite's
own (initdb into a temporary folder, own ports: the machine's shared servers are never touched), faults
injected by stopping the server (``pg_ctl stop -m immediate``), by SIGKILL and by SIGSTOP. Each scenario
keeps a history of every request (start, end, status, Retry-After) and of every acknowledged write, then
compares the final state, read straight from PostgreSQL, with that history (Jepsen-style):

1. **PostgreSQL stopped under write load** (`pg_restart`): 8 clients write atomic op batches (~50 writes/s,
   each with its own idempotency key, retried with the same key on a 503 / connection error), a reader
   searches for acknowledged writes; PostgreSQL is stopped (immediate: no checkpoint, connections cut) for
   ``outage_s`` and started again. Checked: every answer is 200 or 503 with Retry-After (no 500, none slower
   than the client's hang bound), every acknowledged write is in the table, none applied twice, the BM25
   index equals the table, the service recovers without a restart (how long, measured).
2. **Redis lost and back** (`redis_loss`) with two replicas: writes through both, searches on both checked
   against acknowledged writes (read-your-writes across replicas), a probe measuring how long the other
   replica's background index lags a write (the staleness Redis announcements keep small); Redis is
   killed (SIGKILL) and restarted, then frozen (SIGSTOP) and thawed. Checked: no 5xx, 0 stale reads, 0
   lost, writes not slowed by the dead Redis, the lag bounded by the reconcile interval while Redis is
   gone and back to announcement speed after, both indexes equal the table.
3. **An env replica killed mid-episode** (`env_replica_loss`, ``--scenario 3``, not in the default run: it
   needs the ALFWorld data and starts the embedded LLM): the executor on SmolLM2-135M, two ALFWorld replicas
   behind a round-robin TCP proxy standing for the Kubernetes Service (each replica advertising its own
   address), 8 clients posting No Memory episodes one after another; once sessions are open on both
   replicas, replica a's process group is SIGKILLed. Checked: every answer a 200 (the one exception allowed:
   a create that the kill itself cut, 502 ``upstream_unavailable``), none slower than the hang bound; the
   episodes in flight on a end ``env_lost`` with an error saying why (at least one, at most the number in
   flight); no episode started after the kill is lost or fails to start (the proxy sends new sessions to
   b); every other episode ends won, done or max_turns; counts per stop reason.

4. **The LLM backend killed mid-episode and mid-curation** (`bench.chaos_llm`, ``--scenario 4``, not in the
   default run): its own docstring says what is injected and checked.

5. **The executor under load** (`bench.chaos_load`, ``--scenario 5 [--clients N --duration-s S]``, not in the
   default run): 64 clients on `/v1/act` and the gateway's chat completions for 10 minutes over the embedded
   SmolLM2; no 5xx, latency percentiles, the executor's RSS flat within 10 %; its docstring says the rest.

6. **A million skills** (`bench.chaos_million`, ``--scenario 6 [--skills N]``, not in the default run): bulk
   import, search over HTTP with and without writes, restarts with a saved index, memory, rank_bm25 / bm25s /
   PostgreSQL full-text search on the same skills; its own docstring says what is measured and checked.

`tests/test_chaos.py` runs the same code with small parameters (seconds) and asserts the invariants.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from skillos.net import free_port

ROOT = Path(__file__).resolve().parent.parent
PG_BIN = Path(os.environ.get("SKILLOS_CHAOS_PG_BIN", "/usr/lib/postgresql/15/bin"))
REDIS_SERVER = os.environ.get("SKILLOS_CHAOS_REDIS_SERVER", "redis-server")
HANG_S = 10.0  # a request not answered within this many seconds counts as a hang


# --- the real servers the faults are injected into ---

def _as_postgres(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the `postgres` user then."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


class PgCluster:
    """A throwaway PostgreSQL cluster of our own (trust auth, loopback, its own port)."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="skillos-chaos-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        subprocess.run(_as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                                     "-E", "UTF8", "--no-sync"]), check=True, capture_output=True)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{db}"

    def start(self) -> float:
        """Start (crash recovery first, after an immediate stop) and wait until it accepts connections;
        returns that moment (time.monotonic), found by trying to connect every 20 ms."""
        import psycopg

        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200"
        subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-W",
                                     "-o", opts, "start"]), check=True, capture_output=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", connect_timeout=2).close()
                return time.monotonic()
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def stop(self, mode: str = "immediate") -> float:
        """``immediate``: what a crash does (no checkpoint, every connection cut). Returns when it is down."""
        subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"]),
                       check=True, capture_output=True)
        return time.monotonic()

    def pids(self) -> list[int]:
        """The postmaster and every process it started (backends, checkpointer, ...)."""
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return []
        master = int(pid_file.read_text().split()[0])
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == master:
                children.append(int(stat.parent.name))
        return [master, *children]

    def freeze(self) -> list[int]:
        """SIGSTOP the whole cluster: connections stay open, nothing answers (a stuck server, a partition)."""
        pids = self.pids()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        return pids

    def thaw(self, pids: list[int]) -> float:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        return time.monotonic()

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        for pid in self.pids():   # a run interrupted during a freeze: thaw first, or the stop never lands
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if (self.data / "postmaster.pid").exists():
            subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]),
                           capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


class RedisServer:
    """A Redis server of our own (no persistence: pub/sub keeps no state anyway)."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> float:
        self.proc = subprocess.Popen([REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis(port=self.port, socket_connect_timeout=0.5).ping()
                return time.monotonic()
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> float:
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)
        return time.monotonic()

    def destroy(self) -> None:
        self.signal(signal.SIGCONT)
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


class ServeProcess:
    """`skillos serve <args>` as a real process on loopback, in a process group of its own, so that a kill
    takes its children too (an env replica's game workers, the LLM's llama-server), as a pod's death does."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log, self.name = log, args[0]
        full_env = {**os.environ, "SKILLOS_LOG_FORMAT": "json", **env}
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "skillos.cli", "serve", *args, "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=ROOT, start_new_session=True)

    def wait_healthy(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.logs()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not healthy after {timeout:.0f} s:\n{self.logs()[-3000:]}")
            time.sleep(0.3)

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def _killpg(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> float:
        """SIGKILL to the whole process group; the moment it is dead."""
        self._killpg()
        self.proc.wait(timeout=10)
        return time.monotonic()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        self._killpg()  # whatever of the group is left (workers, llama-server)
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)


class SkillRepoProcess(ServeProcess):
    """`skillos serve skillrepo` as a real process on loopback, up (healthy) when built."""

    def __init__(self, env: dict[str, str], log: Path):
        super().__init__(["skillrepo"], {"SKILLOS_DENSE_SEARCH": "false", **env}, log)
        try:
            self.wait_healthy(120)
        except RuntimeError:
            self.stop()
            raise


# --- the history: every request, every acknowledged write ---

@dataclass
class Attempt:
    kind: str            # write, search, ready, probe
    replica: str
    start: float
    end: float
    status: int          # HTTP status; 0: connection refused/reset; -1: no answer within HANG_S
    code: str | None = None
    retry_after: str | None = None
    key: str | None = None


@dataclass
class History:
    attempts: list[Attempt] = field(default_factory=list)
    acked: dict[str, tuple[str, str, float]] = field(default_factory=dict)  # key -> (skill, token, acked at)
    sent: set[str] = field(default_factory=set)                              # every key ever sent
    stale_reads: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, a: Attempt) -> None:
        with self.lock:
            self.attempts.append(a)


def _request(h: httpx.Client, hist: History, kind: str, replica: str, method: str, path: str, *,
             key: str | None = None, **kw) -> httpx.Response | None:
    start = time.monotonic()
    try:
        r = h.request(method, path, timeout=HANG_S, **kw)
    except httpx.TimeoutException:
        hist.add(Attempt(kind, replica, start, time.monotonic(), -1, key=key))
        return None
    except httpx.TransportError:
        hist.add(Attempt(kind, replica, start, time.monotonic(), 0, key=key))
        return None
    code = None
    if r.status_code >= 400:
        try:
            code = r.json()["error"]["code"]
        except Exception:  # noqa: BLE001 - not our error shape: that is a finding too
            code = "not-the-error-shape"
    hist.add(Attempt(kind, replica, start, time.monotonic(), r.status_code, code, r.headers.get("retry-after"), key))
    return r


def _retry_delay(r: httpx.Response | None) -> float:
    if r is not None and (ra := r.headers.get("retry-after", "")).isdigit():
        return min(float(ra), 5.0)
    return 0.5


def writer(urls: dict[str, str], repo: str, client: int, rate: float, stop: threading.Event, hist: History) -> None:
    """Atomic one-op batches at ``rate``/s, each with its own idempotency key, retried with that same key
    until acknowledged (a 503, a dropped connection or a 500 says nothing of whether it was applied)."""
    replicas = list(urls)
    hs = {n: httpx.Client(base_url=u) for n, u in urls.items()}
    nxt, k = time.monotonic(), 0
    try:
        while not stop.is_set():
            nxt = max(nxt + 1.0 / rate, time.monotonic())  # no burst to catch up after an outage
            if (wait := nxt - time.monotonic()) > 0:
                stop.wait(wait)
            key, name, token = f"c{client}-{k}", f"chaos-{client}-{k}", f"tok{client}x{k}"
            ops = [{"name": "new_skill_insert", "arguments": {
                "skill_name": name, "content": f"Write {k} of client {client}, marker {token}."}}]
            replica = replicas[k % len(replicas)]
            with hist.lock:
                hist.sent.add(key)
            while True:
                r = _request(hs[replica], hist, "write", replica, "POST", f"/v1/repos/{repo}/ops", key=key,
                             json={"ops": ops, "idempotency_key": key})
                if r is not None and r.status_code == 200 and r.json()["applied"]:
                    with hist.lock:
                        hist.acked[key] = (name, token, time.monotonic())
                    break
                if stop.is_set():
                    break  # left unacknowledged: it may or may not be applied, but at most once
                stop.wait(_retry_delay(r))
            k += 1
    finally:
        for h in hs.values():
            h.close()


def reader(urls: dict[str, str], repo: str, rate: float, stop: threading.Event, hist: History) -> None:
    """Searches for the marker of a write acknowledged before the search was sent: not found is a stale read."""
    rng = random.Random(7)
    hs = {n: httpx.Client(base_url=u) for n, u in urls.items()}
    try:
        while not stop.is_set():
            stop.wait(1.0 / rate)
            with hist.lock:
                keys = list(hist.acked)[-50:]
            if not keys:
                continue
            key = rng.choice(keys)
            name, token, _ = hist.acked[key]
            replica = rng.choice(list(urls))
            r = _request(hs[replica], hist, "search", replica, "GET", f"/v1/repos/{repo}/search",
                         params={"q": token, "k": 3})
            if r is not None and r.status_code == 200 and name not in {h["name"] for h in r.json()["hits"]}:
                with hist.lock:
                    hist.stale_reads.append(f"{replica}: {name}")
    finally:
        for h in hs.values():
            h.close()


def ready_poller(urls: dict[str, str], stop: threading.Event, hist: History, every_s: float = 0.2) -> None:
    hs = {n: httpx.Client(base_url=u) for n, u in urls.items()}
    try:
        while not stop.wait(every_s):
            for n, h in hs.items():
                _request(h, hist, "ready", n, "GET", "/readyz")
    finally:
        for h in hs.values():
            h.close()


# --- the final state, read from PostgreSQL, against the history ---

def check_state(db_url: str, repo: str, hist: History, replica_urls: dict[str, str]) -> dict:
    import psycopg

    with psycopg.connect(db_url.replace("+psycopg", "")) as c:
        repo_id, seq = c.execute("SELECT id, seq FROM repos WHERE name = %s", (repo,)).fetchone()
        heads = {n: (v, h) for n, v, h in c.execute(
            "SELECT name, version, blob_hash FROM skill_heads WHERE repo_id = %s", (repo_id,))}
        contents = dict(c.execute("SELECT sh.name, b.content FROM skill_heads sh JOIN blobs b ON b.hash = sh.blob_hash "
                                  "WHERE sh.repo_id = %s", (repo_id,)).fetchall())
        versions = dict(c.execute("SELECT name, count(*) FROM skill_versions WHERE repo_id = %s GROUP BY name",
                                  (repo_id,)).fetchall())
        applied_per_key = dict(c.execute(
            "SELECT idempotency_key, count(*) FROM op_log WHERE repo_id = %s AND applied "
            "AND idempotency_key IS NOT NULL GROUP BY idempotency_key", (repo_id,)).fetchall())
    lost = sorted(k for k, (name, token, _) in hist.acked.items() if token not in contents.get(name, ""))
    twice = sorted([k for k, n in applied_per_key.items() if n > 1] + [n for n, c in versions.items() if c > 1])
    unknown = sorted(set(applied_per_key) - hist.sent)  # applied but never sent: impossible unless broken
    live = {n: v for n, (v, h) in heads.items() if h is not None}
    index = {}
    for replica, url in replica_urls.items():
        # one search brings the replica's index up to the database's seq, as every search does
        httpx.get(f"{url}/v1/repos/{repo}/search", params={"q": "client", "k": 1}, timeout=30).raise_for_status()
        st = httpx.get(f"{url}/v1/repos/{repo}/index", timeout=30).json()
        docs = {d["name"]: d["version"] for d in st["documents"]}
        index[replica] = {"equal": docs == live and st["index_seq"] == seq, "index_seq": st["index_seq"],
                          "documents": len(docs)}
    applied_unacked = len(set(applied_per_key) - set(hist.acked))
    return {"acked": len(hist.acked), "sent": len(hist.sent), "rows": len(live), "db_seq": seq,
            "lost": lost, "applied_twice": twice, "applied_never_sent": unknown,
            "applied_not_acked": applied_unacked, "index": index}


# --- summaries ---

def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def tally(attempts: list[Attempt]) -> dict:
    statuses = Counter(a.status for a in attempts)
    no_retry_after = sum(1 for a in attempts if a.status == 503 and not (a.retry_after or "").isdigit())
    lat = [a.end - a.start for a in attempts]
    return {"n": len(attempts), "statuses": dict(sorted(statuses.items())),
            "codes": dict(Counter(a.code for a in attempts if a.code)), "503_without_retry_after": no_retry_after,
            "max_s": round(max(lat), 3) if lat else 0.0, "p50_ms": round(_pct(lat, 50) * 1000, 1),
            "p99_ms": round(_pct(lat, 99) * 1000, 1)}


def _fmt_statuses(t: dict) -> str:
    names = {0: "refused", -1: "hang"}
    return ", ".join(f"{n} × {names.get(s, s)}" for s, n in t["statuses"].items()) or "none"


# --- scenario 1: PostgreSQL stopped under write load ---

def pg_restart(*, clients: int = 8, rate: float = 50.0, warmup_s: float = 10.0, outage_s: float = 6.0,
               after_s: float = 15.0, readers: int = 1, read_rate: float = 10.0, workdir: Path | None = None,
               env: dict[str, str] | None = None, fault: str = "stop") -> dict:
    """Scenario 1. ``rate``: writes/s over all ``clients``. ``fault``: ``stop`` (`pg_ctl stop -m immediate`,
    then start: connections refused, then crash recovery) or ``freeze`` (SIGSTOP of every process of the
    cluster, then SIGCONT: connections open but nothing answers, what a stuck server or a network partition
    looks like). Returns the findings (see `pg_invariants`)."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="skillos-chaos-"))
    pg = PgCluster()
    svc = None
    try:
        pg.start()
        db = pg.create_database("chaos")
        svc = SkillRepoProcess({"SKILLOS_DATABASE_URL": db, "SKILLOS_SYNC_INTERVAL_S": "2", **(env or {})},
                               workdir / "skillrepo.log")
        httpx.post(f"{svc.url}/v1/repos", json={"name": "chaos"}, timeout=30).raise_for_status()
        urls = {"a": svc.url}
        hist, stop = History(), threading.Event()
        threads = [threading.Thread(target=writer, args=(urls, "chaos", c, rate / clients, stop, hist), daemon=True)
                   for c in range(clients)]
        threads += [threading.Thread(target=reader, args=(urls, "chaos", read_rate / readers, stop, hist),
                                     daemon=True) for _ in range(readers)]
        threads.append(threading.Thread(target=ready_poller, args=(urls, stop, hist), daemon=True))
        t_begin = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(warmup_s)
        if fault == "freeze":
            frozen = pg.freeze()
            t_down = time.monotonic()
            time.sleep(outage_s)
            t_restart = t_up = pg.thaw(frozen)
        else:
            t_down = pg.stop("immediate")
            time.sleep(outage_s)
            t_restart = time.monotonic()  # from here PostgreSQL runs crash recovery, then accepts connections
            t_up = pg.start()
        time.sleep(after_s)
        stop.set()
        for t in threads:
            t.join(timeout=HANG_S + 10)
        t_end = time.monotonic()
        state = check_state(db, "chaos", hist, urls)
        log = svc.logs()
    finally:
        if svc is not None:
            svc.stop()
        pg.destroy()

    during = [a for a in hist.attempts if t_down <= a.start < t_restart]  # PostgreSQL certainly down
    starting = [a for a in hist.attempts if t_restart <= a.start < t_up and a.kind != "ready"]
    first_ok = min((a.end for a in hist.attempts if a.kind == "write" and a.status == 200 and a.start >= t_up),
                   default=None)
    first_ready = min((a.end for a in hist.attempts if a.kind == "ready" and a.status == 200 and a.start >= t_up),
                      default=None)
    writes = [a for a in hist.attempts if a.kind == "write"]
    acked_rate = len(hist.acked) / max(1e-9, (t_down - t_begin) + (t_end - t_up))
    return {
        "scenario": "pg_restart", "fault": fault, "env": env or {}, "clients": clients, "rate": rate, "warmup_s": warmup_s, "outage_s": outage_s,
        "after_s": after_s, "outage_measured_s": round(t_up - t_down, 2), "down_s": round(t_restart - t_down, 2),
        "starting_s": round(t_up - t_restart, 2), "starting": tally(starting),
        "write_rate_acked_per_s": round(acked_rate, 1),
        "all": tally([a for a in hist.attempts if a.kind != "ready"]), "writes": tally(writes),
        "during": tally([a for a in during if a.kind != "ready"]),
        # answered while it was down (a probe sent just before the thaw may rightly answer 200 after it)
        "ready_during": tally([a for a in during if a.kind == "ready" and a.end < t_restart]),
        "recovery_write_s": round(first_ok - t_up, 2) if first_ok else None,
        "recovery_ready_s": round(first_ready - t_up, 2) if first_ready else None,
        "stale_reads": len(hist.stale_reads), **state,
        "unhandled_errors_logged": log.count('"unhandled_error"'),
    }


def pg_invariants(r: dict) -> list[str]:
    """What scenario 1 must show; each broken invariant as a sentence (empty: all hold)."""
    bad = []
    allowed = {200, 503}
    if set(r["all"]["statuses"]) - allowed:
        bad.append(f"answers other than 200/503: {r['all']['statuses']}")
    if r["all"]["503_without_retry_after"]:
        bad.append(f"{r['all']['503_without_retry_after']} answers 503 without Retry-After")
    if r["during"]["statuses"].get(503, 0) == 0:
        bad.append(f"no 503 during the outage: {r['during']['statuses']}")
    elif r.get("fault", "stop") == "stop" and set(r["during"]["statuses"]) != {503}:
        # (frozen, a request sent in the last seconds of the freeze is answered 200 after the thaw)
        bad.append(f"during the outage not every request got 503: {r['during']['statuses']}")
    if r["all"]["max_s"] >= HANG_S:
        bad.append(f"a request took {r['all']['max_s']} s (hang)")
    if r["lost"]:
        bad.append(f"{len(r['lost'])} acknowledged writes lost: {r['lost'][:5]}")
    if r["applied_twice"]:
        bad.append(f"{len(r['applied_twice'])} writes applied twice: {r['applied_twice'][:5]}")
    if r["applied_never_sent"]:
        bad.append(f"applied but never sent: {r['applied_never_sent'][:5]}")
    if r["stale_reads"]:
        bad.append(f"{r['stale_reads']} searches missed an acknowledged write")
    if not all(i["equal"] for i in r["index"].values()):
        bad.append(f"index differs from the table: {r['index']}")
    if r["recovery_write_s"] is None:
        bad.append("no write acknowledged after PostgreSQL came back (no recovery without restart)")
    if r["ready_during"]["statuses"].get(200):
        bad.append("/readyz said ready while PostgreSQL was down")
    return bad


# --- scenario 2: Redis lost and back, two replicas ---

def probe(urls: dict[str, str], stop: threading.Event, hist: History, lags: list[tuple[float, float]],
          every_s: float = 0.25) -> None:
    """Writes to repo `probe` on replica a; measures how long until replica b's index (which nobody searches,
    so only announcements and the reconcile loop move it) holds the write: (acked at, lag in s)."""
    a, b = httpx.Client(base_url=urls["a"]), httpx.Client(base_url=urls["b"])
    try:
        n = 0
        while not stop.wait(every_s):
            n += 1
            r = _request(a, hist, "probe", "a", "PUT", "/v1/repos/probe/skills/probe", headers={
                "Content-Type": "application/json"}, json={"name": "probe", "description": f"probe write {n}",
                                                           "body": "x"})
            if r is None or r.status_code >= 300:
                continue
            acked = time.monotonic()
            want = r.json()["version"]
            while not stop.is_set() and time.monotonic() - acked < 30:
                try:
                    docs = b.get("/v1/repos/probe/index", timeout=HANG_S).json()["documents"] or []
                except (httpx.HTTPError, ValueError, KeyError):
                    docs = []
                if any(d["name"] == "probe" and d["version"] >= want for d in docs):
                    lags.append((acked, time.monotonic() - acked))
                    break
                time.sleep(0.01)
    finally:
        a.close()
        b.close()


def redis_loss(*, clients: int = 4, rate: float = 20.0, warmup_s: float = 8.0, outage_s: float = 8.0,
               between_s: float = 8.0, after_s: float = 8.0, read_rate: float = 10.0, sync_interval_s: float = 2.0,
               workdir: Path | None = None, env: dict[str, str] | None = None) -> dict:
    """Scenario 2: two replicas on one database and one Redis; Redis SIGKILLed then restarted, later
    SIGSTOPped then SIGCONTinued."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="skillos-chaos-"))
    pg, rd = PgCluster(), RedisServer()
    svcs: list[SkillRepoProcess] = []
    try:
        pg.start()
        rd.start()
        db = pg.create_database("chaos")
        common = {"SKILLOS_DATABASE_URL": db, "SKILLOS_REDIS_URL": rd.url, "SKILLOS_SYNC_INTERVAL_S": str(sync_interval_s),
                  **(env or {})}
        svcs = [SkillRepoProcess(common, workdir / f"skillrepo-{n}.log") for n in ("a", "b")]
        urls = {"a": svcs[0].url, "b": svcs[1].url}
        for repo in ("chaos", "probe"):
            httpx.post(f"{urls['a']}/v1/repos", json={"name": repo}, timeout=30).raise_for_status()
        httpx.put(f"{urls['a']}/v1/repos/probe/skills/probe", json={"name": "probe", "description": "probe write 0",
                                                                    "body": "x"}, timeout=30).raise_for_status()
        # replica b loads the probe repo's index once; from then on only announcements / reconcile move it
        httpx.get(f"{urls['b']}/v1/repos/probe/search", params={"q": "probe"}, timeout=30).raise_for_status()
        hist, stop, lags = History(), threading.Event(), []
        threads = [threading.Thread(target=writer, args=(urls, "chaos", c, rate / clients, stop, hist), daemon=True)
                   for c in range(clients)]
        threads += [threading.Thread(target=reader, args=(urls, "chaos", read_rate, stop, hist), daemon=True),
                    threading.Thread(target=probe, args=(urls, stop, hist, lags), daemon=True),
                    threading.Thread(target=ready_poller, args=(urls, stop, hist, 0.5), daemon=True)]
        for t in threads:
            t.start()
        marks = {"begin": time.monotonic()}
        time.sleep(warmup_s)
        marks["kill"] = rd.kill()
        time.sleep(outage_s)
        marks["restart"] = rd.start()
        time.sleep(between_s)
        rd.signal(signal.SIGSTOP)
        marks["sigstop"] = time.monotonic()
        time.sleep(outage_s)
        rd.signal(signal.SIGCONT)
        marks["sigcont"] = time.monotonic()
        time.sleep(after_s)
        stop.set()
        for t in threads:
            t.join(timeout=HANG_S + 35)
        marks["end"] = time.monotonic()
        state = check_state(db, "chaos", hist, urls)
        logs = "".join(s.logs() for s in svcs)
    finally:
        for s in svcs:
            s.stop()
        rd.destroy()
        pg.destroy()

    phases = {"redis up (before)": ("begin", "kill"), "redis killed": ("kill", "restart"),
              "redis back (after kill)": ("restart", "sigstop"), "redis frozen (SIGSTOP)": ("sigstop", "sigcont"),
              "redis back (after SIGCONT)": ("sigcont", "end")}
    out_phases = {}
    for label, (a, b) in phases.items():
        t0, t1 = marks[a], marks[b]
        lag = [lg for at, lg in lags if t0 <= at < t1]
        att = [x for x in hist.attempts if t0 <= x.start < t1]
        out_phases[label] = {
            "seconds": round(t1 - t0, 1),
            "writes": tally([x for x in att if x.kind == "write"]),
            "searches": tally([x for x in att if x.kind == "search"]),
            "ready": tally([x for x in att if x.kind == "ready"]),
            "lag_n": len(lag), "lag_p50_ms": round(_pct(lag, 50) * 1000, 1) if lag else None,
            "lag_max_ms": round(max(lag) * 1000, 1) if lag else None}
    # the first probe write after Redis is back that reached b faster than the reconcile loop could have
    # (three in a row, so that a reconcile pass that happened to come right after one write does not count)
    resumed = {}
    for label, mark in (("after kill", "restart"), ("after SIGCONT", "sigcont")):
        after = [(at, lg) for at, lg in lags if at >= marks[mark]]
        resumed[label] = next((round(after[i][0] - marks[mark], 2) for i in range(len(after) - 2)
                               if all(lg < sync_interval_s / 4 for _, lg in after[i:i + 3])), None)
    return {"scenario": "redis_loss", "clients": clients, "rate": rate, "outage_s": outage_s,
            "sync_interval_s": sync_interval_s, "all": tally([a for a in hist.attempts if a.kind in ("write", "search")]),
            "phases": out_phases, "announcements_resumed_after_s": resumed, "stale_reads": len(hist.stale_reads),
            "stale_examples": hist.stale_reads[:5], **state,
            "unhandled_errors_logged": logs.count('"unhandled_error"')}


def redis_invariants(r: dict) -> list[str]:
    bad = []
    if set(r["all"]["statuses"]) - {200}:
        bad.append(f"answers other than 200 (Redis is not needed to serve): {r['all']['statuses']}")
    if r["stale_reads"]:
        bad.append(f"{r['stale_reads']} searches missed an acknowledged write: {r['stale_examples']}")
    if r["lost"] or r["applied_twice"] or r["applied_never_sent"]:
        bad.append(f"lost {r['lost'][:5]}, twice {r['applied_twice'][:5]}, never sent {r['applied_never_sent'][:5]}")
    if not all(i["equal"] for i in r["index"].values()):
        bad.append(f"an index differs from the table: {r['index']}")
    bound_ms = (r["sync_interval_s"] + 1.5) * 1000  # the reconcile interval plus one catch-up on a loaded machine
    for label, ph in r["phases"].items():
        if ph["lag_max_ms"] is not None and ph["lag_max_ms"] > bound_ms:
            bad.append(f"{label}: replica b lagged {ph['lag_max_ms']} ms, over the bound {bound_ms:.0f} ms")
        if ph["writes"]["max_s"] >= 3.0:
            bad.append(f"{label}: a write took {ph['writes']['max_s']} s (Redis on the write path)")
        if ph["ready"]["statuses"].get(503):
            bad.append(f"{label}: /readyz 503 (a replica taken out of service for a lost Redis)")
    for label, t in r["announcements_resumed_after_s"].items():
        if t is None:
            bad.append(f"announcements did not resume {label}")
    return bad


# --- scenario 3: an env replica killed mid-episode ---

class RoundRobinTCP:
    """The Kubernetes Service in front of the env replicas: each new connection goes to the next backend, one
    whose connect fails is skipped (as a Service stops sending to a pod that is gone). Bytes are piped as they
    come; a backend that dies cuts the connections it held."""

    def __init__(self, backends: dict[str, int]):
        self.backends = list(backends.items())
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.turn, self.lock = 0, threading.Lock()
        self.routed: Counter = Counter()   # backend -> connections sent there
        self.skipped: Counter = Counter()  # backend -> connects that failed (and went to the next one)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        up = None
        for _ in range(len(self.backends)):
            with self.lock:
                name, port = self.backends[self.turn % len(self.backends)]
                self.turn += 1
            try:
                up = socket.create_connection(("127.0.0.1", port), timeout=2)
                up.settimeout(None)
                break
            except OSError:
                with self.lock:
                    self.skipped[name] += 1
        if up is None:
            conn.close()
            return
        with self.lock:
            self.routed[name] += 1
        t = threading.Thread(target=self._pipe, args=(up, conn), daemon=True)
        t.start()
        self._pipe(conn, up)
        t.join()
        conn.close()
        up.close()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:  # reset: cut both ways, so that the other direction ends too
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


@dataclass
class Episode:
    client: int
    index: int
    start: float
    end: float
    status: int               # HTTP status; 0: connection failed; -1: no answer within the hang bound
    stop_reason: str | None = None
    error: str | None = None  # the episode's error (200) or the error body's message
    code: str | None = None   # the error body's code (non-200)
    steps: int = 0


NORMAL_ENDS = ("won", "done", "max_turns")


def episode_stream(url: str, client: int, clients: int, n_tasks: int, max_turns: int, max_tokens: int,
                   stop: threading.Event, out: list[Episode], lock: threading.Lock, hang_s: float) -> None:
    """Posts No Memory ALFWorld episodes one after another (distinct indexes per client) until ``stop``;
    the one in flight when ``stop`` is set is let finish. The generic demonstration only (no expert one of
    the task's type): shorter prompts, as the agent's quality is not what is measured here."""
    with httpx.Client(base_url=url, timeout=hang_s) as h:
        k = 0
        while not stop.is_set():
            index = (client + k * clients) % n_tasks
            k += 1
            start = time.monotonic()
            try:
                r = h.post("/v1/episodes", json={"env": "alfworld", "split": "valid_seen", "index": index,
                                                 "max_turns": max_turns, "seed": 0,
                                                 "sampling": {"max_tokens": max_tokens},
                                                 "acting": {"demos_per_type": 0}})
            except httpx.TimeoutException:
                ep = Episode(client, index, start, time.monotonic(), -1, error="no answer within the hang bound")
            except httpx.TransportError as e:
                ep = Episode(client, index, start, time.monotonic(), 0, error=repr(e))
            else:
                end = time.monotonic()
                try:
                    body = r.json()
                except ValueError:
                    body = {}
                if r.status_code == 200:
                    ep = Episode(client, index, start, end, 200, body.get("stop_reason"), body.get("error"),
                                 steps=body.get("steps", 0))
                else:
                    err = body.get("error") if isinstance(body.get("error"), dict) else {}
                    ep = Episode(client, index, start, end, r.status_code, error=err.get("message", r.text[:300]),
                                 code=err.get("code", "not-the-error-shape"))
            with lock:
                out.append(ep)
            if ep.status != 200:
                stop.wait(0.5)  # no hot loop against a failing executor


class EpisodeLoad:
    """``clients`` threads, each an `episode_stream` against the executor at ``url``, started at once."""

    def __init__(self, url: str, clients: int, n_tasks: int, max_turns: int, max_tokens: int, hang_s: float):
        self.episodes: list[Episode] = []
        self.lock, self._stop, self.hang_s = threading.Lock(), threading.Event(), hang_s
        self.threads = [threading.Thread(target=episode_stream, args=(url, c, clients, n_tasks, max_turns, max_tokens,
                                                                      self._stop, self.episodes, self.lock, hang_s),
                                         daemon=True) for c in range(clients)]
        for t in self.threads:
            t.start()

    def wait_answered_after(self, moment: float) -> None:
        """Until an episode started at ``moment`` or later has been answered (at most the hang bound)."""
        deadline = time.monotonic() + self.hang_s
        while time.monotonic() < deadline:
            with self.lock:
                if any(e.start >= moment for e in self.episodes):
                    return
            time.sleep(0.5)

    def stop(self) -> int:
        """Stop posting, let the episodes in flight finish; how many clients never came back."""
        self._stop.set()
        for t in self.threads:
            t.join(timeout=self.hang_s + 30)
        return sum(t.is_alive() for t in self.threads)


def alfworld_data_dir(given: Path | None = None) -> Path:
    data = given or Path(os.environ.get("SKILLOS_ALFWORLD_DATA", ROOT.parent / "shared" / "data" / "alfworld"))
    if not (data / "json_2.1.1").is_dir():
        raise RuntimeError(f"ALFWorld data missing at {data} (set SKILLOS_ALFWORLD_DATA)")
    return data


def _open_sessions(url: str) -> int:
    try:
        return httpx.get(f"{url}/v1/sessions", timeout=5).json()["count"]
    except (httpx.HTTPError, ValueError, KeyError):
        return -1


def env_replica_loss(*, clients: int = 8, max_turns: int = 6, max_tokens: int = 48, warmup_s: float = 30.0,
                     after_s: float = 40.0, grace_s: float = 1.0, hang_s: float = 300.0,
                     workdir: Path | None = None, alfworld_data: Path | None = None) -> dict:
    """Scenario 3: ``clients`` streams of ALFWorld episodes through the executor, whose env URL is a round-robin
    proxy in front of two replicas; replica a SIGKILLed (its whole process group) mid-episode, once
    ``warmup_s`` have passed and sessions are open on both replicas. The load goes on ``after_s`` more, and
    past that until an episode started after the kill has been answered (at most ``hang_s``): on a slow
    machine an episode can outlast ``after_s``, and the stream going on is what is checked."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="skillos-chaos-"))
    data = alfworld_data_dir(alfworld_data)
    procs: list[ServeProcess] = []
    proxy = None
    try:
        llm = ServeProcess(["llm", "--model", "smollm2-135m-instruct"], {
            "SKILLOS_LLM_N_THREADS": "1", "SKILLOS_LLM_PARALLEL": str(min(clients, 8))}, workdir / "llm.log")
        procs.append(llm)
        replicas = {}
        for name in ("a", "b"):
            port = free_port()
            replicas[name] = ServeProcess(["alfworld"], {
                "SKILLOS_ALFWORLD_DATA": str(data), "SKILLOS_ALFWORLD_SPARE_WORKERS": "1",
                "SKILLOS_ENV_REPLICA_ID": name, "SKILLOS_ENV_ADVERTISE_URL": f"http://127.0.0.1:{port}",
                "SKILLOS_ENV_DRAIN_TIMEOUT_S": "0"}, workdir / f"alfworld-{name}.log", port=port)
            procs.append(replicas[name])
        proxy = RoundRobinTCP({n: r.port for n, r in replicas.items()})
        executor = ServeProcess(["executor"], {
            "SKILLOS_ALFWORLD_URL": proxy.url, "SKILLOS_EXECUTOR_LLM_BASE_URL": f"{llm.url}/v1",
            "SKILLOS_EXECUTOR_LLM_MODEL": "smollm2-135m-instruct", "SKILLOS_SKILLREPO_URL": "http://127.0.0.1:9",
            # a loaded machine's first prompts can take over a minute: no LLM timeout and retry mid-scenario
            "SKILLOS_EXECUTOR_LLM_TIMEOUT_S": str(hang_s), "SKILLOS_EXECUTOR_LLM_MAX_RETRIES": "0",
            "SKILLOS_EXECUTOR_MAX_CONCURRENT_EPISODES": str(max(8, clients))}, workdir / "executor.log")
        procs.append(executor)
        for p in procs:  # all started at once; on a loaded machine the replicas' imports take a while
            p.wait_healthy(300)
        n_tasks = httpx.get(f"{replicas['b'].url}/v1/tasks", params={"split": "valid_seen"}, timeout=60).json()["count"]

        marks = {"begin": time.monotonic()}
        load = EpisodeLoad(executor.url, clients, n_tasks, max_turns, max_tokens, hang_s)
        time.sleep(warmup_s)
        # kill only once sessions are open on both replicas (at most 60 s more), so that the kill is mid-episode
        deadline = time.monotonic() + 60
        while True:
            open_at_kill = {n: _open_sessions(r.url) for n, r in replicas.items()}
            if all(v > 0 for v in open_at_kill.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        marks["kill"] = replicas["a"].kill()
        time.sleep(after_s)
        load.wait_answered_after(marks["kill"] + grace_s)
        marks["stop"] = time.monotonic()
        still_running = load.stop()
        marks["end"] = time.monotonic()
        episodes = load.episodes
        logs = executor.logs()
        routed, skipped = dict(proxy.routed), dict(proxy.skipped)
    finally:
        if proxy is not None:
            proxy.close()
        for p in reversed(procs):
            p.stop()

    kill = marks["kill"]
    rel = lambda x: round(x - marks["begin"], 1)
    in_flight = [e for e in episodes if e.start < kill < e.end]
    after = [e for e in episodes if e.start >= kill + grace_s]
    lost = [e for e in episodes if e.status == 200 and e.stop_reason == "env_lost"]
    durations = [e.end - e.start for e in episodes]
    return {
        "scenario": "env_replica_loss", "clients": clients, "max_turns": max_turns, "max_tokens": max_tokens,
        "warmup_s": warmup_s, "after_s": after_s, "grace_s": grace_s, "hang_s": hang_s,
        "kill_at_s": rel(kill), "stop_at_s": rel(marks["stop"]), "end_at_s": rel(marks["end"]),
        "open_sessions_at_kill": open_at_kill, "clients_still_running": still_running,
        "episodes": [vars(e) | {"start": rel(e.start), "end": rel(e.end)} for e in episodes],
        "n": len(episodes), "statuses": dict(Counter(e.status for e in episodes)),
        "stop_reasons": dict(Counter(e.stop_reason for e in episodes if e.status == 200)),
        "in_flight_at_kill": len(in_flight),
        "in_flight_outcomes": dict(Counter(e.stop_reason if e.status == 200 else f"HTTP {e.status} {e.code}"
                                           for e in in_flight)),
        "lost": len(lost), "lost_not_in_flight": [vars(e) for e in lost if not (e.start < kill < e.end)],
        "lost_errors": sorted({(e.error or "")[:160] for e in lost}),
        "after_kill": len(after), "after_kill_statuses": dict(Counter(e.status for e in after)),
        "after_kill_stop_reasons": dict(Counter(e.stop_reason for e in after if e.status == 200)),
        "after_kill_finished": sum(1 for e in after if e.status == 200 and e.stop_reason in NORMAL_ENDS),
        "failed_to_start": [vars(e) | {"start": rel(e.start), "end": rel(e.end)} for e in episodes if e.status != 200],
        "max_s": round(max(durations), 1) if durations else 0.0,
        "p50_s": round(_pct(durations, 50), 1) if durations else None,
        "proxy_routed": routed, "proxy_skipped": skipped,
        "unhandled_errors_logged": logs.count('"unhandled_error"'),
    }


def env_invariants(r: dict) -> list[str]:
    """What scenario 3 must show; each broken invariant as a sentence (empty: all hold)."""
    bad = []
    eps, kill, grace = r["episodes"], r["kill_at_s"], r["grace_s"]
    # the only answer other than 200 allowed: a create that the kill itself cut (in flight at the kill,
    # started before it + grace), answered 502 upstream_unavailable; no session had been opened for it
    excused = [e for e in r["failed_to_start"] if e["status"] == 502 and e["code"] == "upstream_unavailable"
               and e["start"] < kill + grace and e["end"] >= kill]
    others = [e for e in r["failed_to_start"] if e not in excused]
    if others:
        bad.append(f"{len(others)} answers other than 200 (besides a create cut by the kill): "
                   f"{Counter((e['status'], e['code']) for e in others)}; first: {others[0]['error']!r:.200}")
    if r["max_s"] >= r["hang_s"] or r["clients_still_running"]:
        bad.append(f"an episode hung (slowest {r['max_s']} s, bound {r['hang_s']} s; "
                   f"{r['clients_still_running']} clients never came back)")
    if r["lost"] < 1:
        bad.append(f"no episode ended env_lost ({r['in_flight_at_kill']} in flight at the kill, open sessions "
                   f"{r['open_sessions_at_kill']})")
    if r["lost"] > r["in_flight_at_kill"] or r["lost_not_in_flight"]:
        bad.append(f"{r['lost']} env_lost, more than the {r['in_flight_at_kill']} in flight at the kill, or not in "
                   f"flight: {r['lost_not_in_flight'][:3]}")
    if any(not (e.get("error") or "").strip() for e in eps if e["stop_reason"] == "env_lost"):
        bad.append("an env_lost episode without an error saying why")
    late = [e for e in eps if e["start"] >= kill + grace and (e["status"] != 200 or e["stop_reason"] not in NORMAL_ENDS)]
    if late:
        bad.append(f"{len(late)} episodes started after the kill (+{grace} s) did not finish normally: "
                   f"{Counter((e['status'], e['stop_reason'], e['code']) for e in late)}")
    if r["after_kill_finished"] < 1:
        bad.append("no episode started after the kill finished (the stream did not go on)")
    odd = Counter(e["stop_reason"] for e in eps if e["status"] == 200 and e["stop_reason"] not in (*NORMAL_ENDS, "env_lost"))
    if odd:
        bad.append(f"episodes that were not lost ended abnormally: {dict(odd)}")
    if r["unhandled_errors_logged"]:
        bad.append(f"{r['unhandled_errors_logged']} unhandled_error lines in the executor's log")
    return bad


def render_env(r: dict, command: str) -> str:
    bad = env_invariants(r)
    fmt = lambda c: ", ".join(f"{n} × {k}" for k, n in sorted(c.items(), key=lambda kv: -kv[1])) or "none"
    failed = r["failed_to_start"]
    lines = [
        "### Scenario 3: an env replica killed mid-episode\n",
        f"`{command}`\n",
        ("* **Setup**: the executor on the embedded SmolLM2-135M (`skillos serve llm`, llama-server, 1 thread); two "
         "ALFWorld replicas `a` and `b`, each advertising its own address (`SKILLOS_ENV_ADVERTISE_URL`); the "
         "executor's `SKILLOS_ALFWORLD_URL` is a round-robin TCP proxy standing for the Kubernetes Service (each new "
         "connection to the next replica, one that refuses the connect skipped). Creates go through it, a session's "
         "steps straight to its replica's `session_url`."),
        (f"* **Load**: {r['clients']} clients, each posting No Memory episodes (`valid_seen`, distinct indexes, "
         f"`max_turns` {r['max_turns']}, {r['max_tokens']} tokens a turn) one after another; {r['n']} episodes "
         f"answered in {r['end_at_s']} s (p50 {r['p50_s']} s, slowest {r['max_s']} s; hang bound {r['hang_s']:.0f} s)."),
        (f"* **Injected**: SIGKILL to replica a's process group (server and game workers: a pod gone) at "
         f"{r['kill_at_s']} s, with sessions open {r['open_sessions_at_kill']} and {r['in_flight_at_kill']} episodes "
         f"in flight; load kept on {r['stop_at_s'] - r['kill_at_s']:.0f} s more (at least {r['after_s']:.0f} s and until an "
         f"episode started after the kill was answered), then the clients stopped and their in-flight episodes "
         f"let finish. Proxy connections: {r['proxy_routed']}, connects to a dead replica skipped: "
         f"{r['proxy_skipped'] or 0}."),
        (f"* **Answered**: statuses {fmt({('HTTP ' + str(k)): v for k, v in r['statuses'].items()})}; stop reasons "
         f"{fmt(r['stop_reasons'])}."),
        (f"* **In flight at the kill** ({r['in_flight_at_kill']}): {fmt(r['in_flight_outcomes'])}. The lost ones say "
         f"why: {'; '.join(f'`{x}`' for x in r['lost_errors'][:2]) or '-'}."),
        (f"* **Failed to start**: {len(failed)}"
         + (": " + "; ".join(f"HTTP {e['status']} {e['code']} ({e['start']}–{e['end']} s): {str(e['error'])[:120]}"
                             for e in failed[:3]) if failed else "") + "."),
        (f"* **Started after the kill** (+{r['grace_s']} s grace): {r['after_kill']} episodes, statuses "
         f"{fmt({('HTTP ' + str(k)): v for k, v in r['after_kill_statuses'].items()})}, stop reasons "
         f"{fmt(r['after_kill_stop_reasons'])}: the stream went on on b. `unhandled_error` lines in the executor's "
         f"log: {r['unhandled_errors_logged']}."),
        f"* **Invariants**: {'all hold' if not bad else '; '.join(bad)}.\n",
    ]
    return "\n".join(lines)


# --- the report ---

def _index_cell(r: dict) -> str:
    return ", ".join(f"{n}: {'equal' if i['equal'] else 'DIFFERS'} ({i['documents']} docs, seq {i['index_seq']})"
                     for n, i in r["index"].items())


def render_pg(r: dict, command: str) -> str:
    d, a = r["during"], r["all"]
    bad = pg_invariants(r)
    lines = [
        (f"### Scenario 1{'b' if r.get('fault') == 'freeze' else ''}: PostgreSQL "
        f"{'frozen' if r.get('fault') == 'freeze' else 'stopped'} under write load\n"),
        f"`{command}`\n",
        (f"* **Load**: {r['clients']} clients, {r['rate']:.0f} atomic op batches/s asked (each one new skill, its "
        f"own idempotency key, retried with that key after a 503 or a dropped connection), {r['write_rate_acked_per_s']} "
        "acknowledged/s while PostgreSQL was up; one reader searching for acknowledged writes; `/readyz` polled."),
        (f"* **Injected**: `pg_ctl stop -m immediate` after {r['warmup_s']:.0f} s, `pg_ctl start` {r['down_s']} s "
         f"later; crash recovery until it accepted connections took {r['starting_s']} s more (unavailable "
         f"{r['outage_measured_s']} s in all); load kept on {r['after_s']:.0f} s more.") if r.get("fault") != "freeze"
        else (f"* **Injected**: SIGSTOP to every process of the cluster after {r['warmup_s']:.0f} s (open "
              f"connections stay open, nothing answers), SIGCONT {r['down_s']} s later; load kept on "
              f"{r['after_s']:.0f} s more. The service ran with {r['env']}."),
        (f"* **Acknowledged**: {r['acked']} writes (of {r['sent']} sent); in the table after: {r['rows']} skills, "
        f"seq {r['db_seq']}."),
        (f"* **During the outage**: {d['n']} requests: {_fmt_statuses(d)}; codes {d['codes'] or '-'}; "
        f"503 without Retry-After: {d['503_without_retry_after']}; slowest {d['max_s']} s "
        f"(p50 {d['p50_ms']} ms). `/readyz`: {_fmt_statuses(r['ready_during'])}. While it started up: "
        f"{_fmt_statuses(r['starting'])}."),
        (f"* **Whole run**: {a['n']} requests: {_fmt_statuses(a)}; slowest {a['max_s']} s; "
        f"`unhandled_error` lines in the service log: {r['unhandled_errors_logged']}."),
        (f"* **Recovery without restart**: first acknowledged write {r['recovery_write_s']} s after PostgreSQL "
        f"accepted connections again, `/readyz` 200 after {r['recovery_ready_s']} s."),
        (f"* **Found after**: lost {len(r['lost'])}, applied twice {len(r['applied_twice'])}, applied without being "
        f"acknowledged {r['applied_not_acked']} (allowed: sent, answer lost), stale searches {r['stale_reads']}; "
        f"index vs table: {_index_cell(r)}."),
        f"* **Invariants**: {'all hold' if not bad else '; '.join(bad)}.\n",
    ]
    return "\n".join(lines)


def render_redis(r: dict, command: str) -> str:
    bad = redis_invariants(r)
    rows = ["| phase | s | writes (statuses, p50 / max) | searches | `/readyz` | lag of b's index p50 / max (n) |",
            "|---|---|---|---|---|---|"]
    for label, ph in r["phases"].items():
        w, s = ph["writes"], ph["searches"]
        rows.append(f"| {label} | {ph['seconds']} | {_fmt_statuses(w)}; {w['p50_ms']} ms / {w['max_s']} s | "
                    f"{_fmt_statuses(s)} | {_fmt_statuses(ph['ready'])} | "
                    f"{ph['lag_p50_ms']} / {ph['lag_max_ms']} ms ({ph['lag_n']}) |")
    lines = [
        "### Scenario 2: Redis lost and back, two skill-repo replicas\n",
        f"`{command}`\n",
        (f"* **Load**: {r['clients']} clients writing {r['rate']:.0f} batches/s through both replicas in turn, one "
        "reader searching either replica for the marker of a write acknowledged before the search (read-your-"
        "writes across replicas), a probe writing on replica a every 0.25 s and timing how long replica b's "
        f"index (never searched, so moved only by Redis announcements or the {r['sync_interval_s']} s reconcile "
        "loop) takes to hold it."),
        (f"* **Injected**: Redis SIGKILLed, restarted {r['outage_s']:.0f} s later; later SIGSTOPped (frozen: "
        f"connections hang instead of failing) for {r['outage_s']:.0f} s, then SIGCONT."),
        f"* **Acknowledged**: {r['acked']} writes (of {r['sent']} sent).",
        "",
        *rows,
        "",
        (f"* **Bounded staleness**: searches read the repo's seq from PostgreSQL first, so {r['stale_reads']} of "
        f"{r['all']['statuses'].get(200, 0)} answered reads missed an acknowledged write; the background index "
        f"of the other replica lags by the announcement time with Redis and by at most the reconcile interval "
        f"({r['sync_interval_s']} s, `SKILLOS_SYNC_INTERVAL_S`) plus one catch-up without it (table)."),
        (f"* **Invalidation resumes**: first of three probe writes in a row reaching b in under {r['sync_interval_s'] / 4:.2f} s (faster "
        f"than the reconcile loop) {r['announcements_resumed_after_s']['after kill']} s after the restart, "
        f"{r['announcements_resumed_after_s']['after SIGCONT']} s after SIGCONT."),
        (f"* **Found after**: lost {len(r['lost'])}, applied twice {len(r['applied_twice'])}; index vs table: "
        f"{_index_cell(r)}; `unhandled_error` lines: {r['unhandled_errors_logged']}."),
        f"* **Invariants**: {'all hold' if not bad else '; '.join(bad)}.\n",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="1,2", help="comma-separated: 1 (PostgreSQL), 2 (Redis), 3 (an env "
                    "replica killed mid-episode), 4 (the LLM killed mid-episode and mid-curation), 5 (the executor under "
                    "load), 6 (a million skills); 3, 4 and 5 need the embedded LLM (3 and 4 the ALFWorld data too), "
                    "and none of 3-6 is in the default")
    ap.add_argument("--outage-s", type=float, default=None, help="length of each fault (default: PostgreSQL 6 s stopped, 12 s frozen; Redis 8 s)")
    ap.add_argument("--clients", type=int, default=None, help="scenarios 3, 4, 5: concurrent episode streams "
                    "or clients (default 8, 4, 64)")
    ap.add_argument("--max-turns", type=int, default=6, help="scenario 3: max_turns of each episode")
    ap.add_argument("--warmup-s", type=float, default=30.0, help="scenario 3: seconds of load before the kill")
    ap.add_argument("--after-s", type=float, default=40.0, help="scenario 3: seconds of load after the kill")
    ap.add_argument("--duration-s", type=float, default=600.0, help="scenario 5: seconds of load")
    ap.add_argument("--no-admission", action="store_true", help="scenario 5: lift the executor's bound on LLM calls "
                    "in flight (how it was before it)")
    ap.add_argument("--skills", type=int, default=1_000_000, help="scenario 6: how many skills")
    ap.add_argument("--append", type=Path, default=None, help="append the markdown section to this file")
    ap.add_argument("--json", action="store_true", help="also print the raw findings as JSON")
    ap.add_argument("--title", default="", help="a heading for the section (e.g. what code was run)")
    args = ap.parse_args(argv)
    command = "python -m bench.chaos " + " ".join(argv if argv is not None else sys.argv[1:])
    parts, failed = [], False
    load = os.getloadavg()
    for sc in args.scenario.split(","):
        if sc.strip() == "1":
            for fault in ("stop", "freeze"):
                # frozen longer than the clients' hang bound (HANG_S), so that a hang shows as one
                env = {"SKILLOS_DATABASE_REQUEST_TIMEOUT_S": "5"} if fault == "freeze" else {}
                outage = args.outage_s or (12.0 if fault == "freeze" else 6.0)
                r = pg_restart(fault=fault, env=env, outage_s=outage)
                parts.append(render_pg(r, command))
                failed |= bool(pg_invariants(r))
        elif sc.strip() == "2":
            r = redis_loss(**({"outage_s": args.outage_s} if args.outage_s else {}))
            parts.append(render_redis(r, command))
            failed |= bool(redis_invariants(r))
        elif sc.strip() == "3":
            r = env_replica_loss(clients=args.clients or 8, max_turns=args.max_turns, warmup_s=args.warmup_s,
                                 after_s=args.after_s)
            parts.append(render_env(r, command))
            failed |= bool(env_invariants(r))
        elif sc.strip() == "4":
            from bench.chaos_llm import llm_invariants, llm_loss, render_llm  # it imports this module

            r = llm_loss(clients=args.clients or 4)
            parts.append(render_llm(r, command))
            failed |= bool(llm_invariants(r))
        elif sc.strip() == "5":
            from bench.chaos_load import executor_load, load_invariants, render_load  # it imports this module

            r = executor_load(clients=args.clients or 64, duration_s=args.duration_s, admission=not args.no_admission)
            parts.append(render_load(r, command))
            failed |= bool(load_invariants(r))
        elif sc.strip() == "6":
            from bench.chaos_million import (  # it imports this module
                million,
                million_invariants,
                render_million,
            )

            r = million(skills=args.skills)
            parts.append(render_million(r, command))
            failed |= bool(million_invariants(r))
        else:
            ap.error(f"unknown scenario {sc!r}")
        if args.json:
            import json

            print(json.dumps(r, indent=1, default=str))
    end = os.getloadavg()
    head = f"## {args.title}\n\n" if args.title else ""
    text = head + "\n".join(parts) + (f"\nmachine: {os.cpu_count()} cores, load average {load[0]:.1f} at the start, "
                               f"{end[0]:.1f} at the end; python {sys.version.split()[0]}"
                               + (f"; PostgreSQL {PG_BIN.parent.name} and Redis of the suite's own"
                                  if set(args.scenario.replace(" ", "").split(",")) & {"1", "2"} else "") + ".\n")
    print(text)
    if args.append:
        with open(args.append, "a") as f:
            f.write("\n" + text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
