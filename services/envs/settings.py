"""Settings of the environment servers (env vars ``SKILLOS_<FIELD>``)."""

from __future__ import annotations

from typing import Literal

from skillos.settings import EnvDataSettings, InboundAuthSettings


class EnvServerSettings(EnvDataSettings, InboundAuthSettings):
    """An env server reads where its data is and how it runs sessions; it calls no other service. With
    SKILLOS_AUTH_MODE=tokens a caller needs a token (any scope) and a session is its opener's."""

    # Behind a load balancer with more than one replica (see services/envs/README.md, "Replicas"):
    # the address clients reach this replica at, returned with every new session as `session_url`; the
    # client sends the session's later calls there. `{hostname}`, `{ip}` and `{port}` are replaced by this
    # host's name, its address and the port served (compose: http://{ip}:{port}; Kubernetes:
    # http://$(POD_IP):8010). Empty: not advertised (one replica)
    env_advertise_url: str = ""
    # this replica's name, the prefix of its session ids; empty: random per process start
    env_replica_id: str = ""
    # on SIGTERM: refuse new sessions (503 draining) and let open ones finish for up to this many seconds
    # before shutting down (Kubernetes: terminationGracePeriodSeconds must be longer)
    env_drain_timeout_s: float = 300.0
    # idle sessions are closed after this many seconds without a request
    env_session_ttl_s: float = 600.0
    # open sessions per server; past it POST /v1/sessions answers 429 with Retry-After
    env_max_sessions: int = 64
    # threads that run blocking game calls (resets, steps); ALFWorld's real work is in its workers
    env_threads: int = 32
    # episode length cap (done with info.truncated); 0 = the environment's default
    # (ALFWorld 50 and WebShop 15 as in GiGPO/verl-agent, reasoning 1)
    env_max_episode_steps: int = 0
    # seconds one step may take before the game is declared hung and its session failed
    env_step_timeout_s: float = 60.0
    # seconds a game may take to load and reset
    env_reset_timeout_s: float = 120.0
    # ALFWorld: worker processes kept started and idle, ready for the next session
    alfworld_spare_workers: int = 2
    # ALFWorld: a worker is replaced after this many games (bounds any slow growth inside textworld)
    alfworld_games_per_worker: int = 50
    # ALFWorld: memoize TextWorld's grammar parsing in the workers (same text, ~3x faster steps)
    alfworld_parse_cache: bool = True
    # reasoning: where the tasks come from (services/envs/README.md, "Reasoning tasks"): auto =
    # reasoning-gym's families and the demo set beside them (only the JSONL files of SKILLOS_REASONING_DATA
    # when it is set; the demo set alone without the reasoning-gym package), reasoning-gym = the
    # families only, jsonl = the JSONL files only (SKILLOS_REASONING_DATA, else the demo set)
    reasoning_source: Literal["auto", "reasoning-gym", "jsonl"] = "auto"
    # reasoning: the reasoning-gym families served (comma-separated), each a task type; an unknown one
    # stops the server with the list of the known ones
    reasoning_families: str = "gsm_symbolic,chain_sum,letter_counting,base_conversion"
    # reasoning: tasks listed per family and split (GET /v1/tasks); any index below 10^8 opens by id
    reasoning_tasks_per_split: int = 200
