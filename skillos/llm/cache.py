"""A completion cache: the same request body to the same model gives the stored answer.

Evaluation runs on a 2-core CPU take hours, and they are interrupted. With ``SKILLOS_LLM_CACHE`` (or
``SKILLOS_<ROLE>_LLM_CACHE``) set to a file, every completion is kept in SQLite under the hash of its
request body (model, messages, sampling, seed, response format), so

- a run started again replays what it already did in milliseconds and goes on where it stopped
  (the skill repo's idempotency keys make the replayed curator batches land once);
- arms that share episodes share them: No Memory's episodes of a (task, seed, executor options)
  are played once, whichever comparison asks for them.

Only requests that ask for a repeatable answer are cached (a seed, or temperature 0): a request that
wants a fresh sample gets one. Several processes (executor, curator) may share the file.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path


def cacheable(body: dict) -> bool:
    return body.get("seed") is not None or body.get("temperature") == 0


def key_of(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class CompletionCache:
    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, model TEXT, answer TEXT)")
        self.hits = self.misses = 0

    def get(self, body: dict) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT answer FROM completions WHERE key = ?", (key_of(body),)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return json.loads(row[0])

    def put(self, body: dict, answer: dict) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO completions VALUES (?, ?, ?)",
                             (key_of(body), str(body.get("model", "")), json.dumps(answer, ensure_ascii=False)))

    def close(self) -> None:
        with self._lock:
            self._db.close()
