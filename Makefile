# Two entry points, both runnable on a fresh machine: `make demo` (the main job) and `make test`.
# Everything is installed into .venv with uv, which resolves Airflow's ~200 dependencies in
# seconds instead of minutes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: install demo tour test test-quick lint typecheck docs pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv

# torch first, with pip: the test extra pins it, and pip installs that pin as a CPU build here, where
# uv would resolve the same pin to a CUDA build of several GB; uv then finds it installed.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/uv pip install --python $(BIN)/python --quiet -e ".[test]"
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# The main job: the fan-out example DAG through a real Airflow against the Kubernetes emulator.
# DEMO_ONCE=1 exits after the run (non-zero if it failed); otherwise Ctrl-C stops everything.
demo: install
	$(BIN)/python -m airflow_gpu.testing.demo

# What the accelerator specs become, from the command line.
tour: install
	$(BIN)/airflow-gpu catalog
	$(BIN)/airflow-gpu describe H100:8 --target kubernetes --capacity spot-if-available
	$(BIN)/airflow-gpu describe A10G:4 --target batch --memory 96Gi
	$(BIN)/airflow-gpu recommend --params 7B --task lora --precision bf16
	$(BIN)/airflow-gpu images --accelerator H100:8 --driver 535 --registry dockerhub

lint: install
	$(BIN)/ruff check provider tests bench dags docs
	$(BIN)/ruff format --check provider tests bench dags docs

typecheck: install
	$(BIN)/mypy

docs: install
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# Every test, end-to-end included; the 15 slowest are listed at the end so that the cost stays visible.
pytest: install
	$(BIN)/pytest -n 2 --durations=15

test: lint typecheck docs pytest

# The inner loop: unit and emulator-API tests, no Airflow processes (the `slow` marker), in under a minute.
test-quick: install
	$(BIN)/pytest -m "not slow" -q

bench: install
	$(BIN)/python bench/import_time.py
	$(BIN)/python bench/emulator_throughput.py
	$(BIN)/python bench/dag_parse_time.py
	$(BIN)/python bench/batch_polling.py
	$(BIN)/python bench/profiling_sampler.py
	$(BIN)/python bench/report_render.py

clean:
	rm -rf $(VENV) docs/_build .pytest_cache .mypy_cache .ruff_cache .hypothesis .demo .emulator
