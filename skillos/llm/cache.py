"""A completion cache: the same request body to the same model gives the stored answer.

Evaluation runs on a 2-core CPU take hours, and they are interrupted. With ``SKILLOS_LLM_CACHE`` (or
``SKILLOS_<ROLE>_LLM_CACHE``) set to a file, every completion is kept in SQLite under the hash of its
request body (model, messages, sampling, seed, response format), so

- a run started again replays what it already did in milliseconds and goes on where it stopped
  (the skill repo's idempotency keys make the replayed curator batches land once);
- arms that share episodes share them: No Memory's episodes of a (task, seed, executor options)
  are played once, whichever comparison asks for them.

Only requests that ask for a repeatable answer are cached (a seed, or temperature 0): a request that
wants a fresh sample gets one. The key is the request body and the server's address: the same model
name served elsewhere (another quantization, another machine) is another answer. Never set it for a
role whose weights change under the same name (the trainer's curator policy): it would replay the old
policy. Several processes (executor, curator) may share the file; a row that cannot be read is a miss.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path

from skillos.logging import get_logger

log = get_logger("llm.cache")


def cacheable(body: dict) -> bool:
    return body.get("seed") is not None or body.get("temperature") == 0


def key_of(body: dict, server: str = "") -> str:
    # surrogatepass: a body may carry a lone surrogate (a model's parsed text); the key is a hash, not text
    text = json.dumps([server, body], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class CompletionCache:
    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, model TEXT, answer TEXT)")
        self.hits = self.misses = 0

    def get(self, body: dict, server: str = "") -> dict | None:
        try:
            with self._lock:
                row = self._db.execute("SELECT answer FROM completions WHERE key = ?",
                                       (key_of(body, server),)).fetchone()
            answer = json.loads(row[0]) if row is not None else None
        except (sqlite3.Error, ValueError) as e:  # a locked or damaged file is a miss, never a failed call
            log.warning("llm_cache_unreadable", path=str(self.path), error=str(e))
            answer = None
        if answer is None:
            self.misses += 1
            return None
        self.hits += 1
        return answer

    def put(self, body: dict, answer: dict, server: str = "") -> None:
        try:
            with self._lock:
                self._db.execute("INSERT OR REPLACE INTO completions VALUES (?, ?, ?)",
                                 (key_of(body, server), str(body.get("model", "")),
                                  json.dumps(answer, ensure_ascii=False)))
        except sqlite3.Error as e:
            log.warning("llm_cache_unwritable", path=str(self.path), error=str(e))

    def close(self) -> None:
        with self._lock:
            self._db.close()
