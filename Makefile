# Two entry points, both runnable on a fresh machine: `make demo` (the main job) and `make test`.
# Everything is installed into .venv with uv, which resolves Airflow's ~200 dependencies in
# seconds instead of minutes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
export PATH := $(CURDIR)/$(BIN):$(PATH)
# Where PYTHONDONTWRITEBYTECODE is set (some CI images set it) Python keeps no bytecode caches: each
# of the hundred-odd Airflow processes the tests and the demo start would compile Airflow from source
# again, and pytest would rewrite every test module on every run (20 s of a 2-core machine's time
# before the first test). The installed packages are compiled once at install; this keeps the
# caches of the project's own modules and tests.
unexport PYTHONDONTWRITEBYTECODE
# Programs outside Python (tools/system-packages.txt): installed when missing, or named in one line.
SYSTEM_PACKAGES := $(PYTHON) tools/system_packages.py ensure

.PHONY: install system-packages-test demo tour test test-quick test-floor lint typecheck docs docs-screenshots pytest bench clean soak

$(BIN)/python:
	$(SYSTEM_PACKAGES) venv
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv

# torch first, with pip: the test extra pins it, and pip installs that pin as a CPU build here, where
# uv would resolve the same pin to a CUDA build of several GB; uv then finds it installed.
# --compile-bytecode: see PYTHONDONTWRITEBYTECODE above.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -e ".[test]"
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# Before any test runs: chromium for the browser tests (tests/programs.py holds the suite to the list).
system-packages-test:
	@$(SYSTEM_PACKAGES) test

# The main job: the fan-out example DAG through a real Airflow against the Kubernetes emulator.
# DEMO_ONCE=1 exits after the run (non-zero if it failed); otherwise Ctrl-C stops everything.
demo: install
	@$(SYSTEM_PACKAGES) demo
	$(BIN)/python -m airflow_gpu.testing.demo

# What the accelerator specs become, from the command line.
tour: install
	$(BIN)/airflow-gpu catalog
	$(BIN)/airflow-gpu describe H100:8 --target kubernetes --capacity spot-if-available
	$(BIN)/airflow-gpu describe A10G:4 --target batch --memory 96Gi
	$(BIN)/airflow-gpu recommend --params 7B --task lora --precision bf16
	$(BIN)/airflow-gpu images --accelerator H100:8 --driver 535 --registry dockerhub

lint: install
	$(BIN)/ruff check provider tests bench dags docs tools
	$(BIN)/ruff format --check provider tests bench dags docs tools

typecheck: install
	$(BIN)/mypy

docs: install
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# The docs' screenshots of Airflow's UI, taken anew: the browser test's steps on a real Airflow (the run's
# grid, a task's GPU Profile tab, the run's), copied from its artifacts into docs/.
docs-screenshots: install
	$(BIN)/pytest -q -p no:cacheprovider tests/e2e/test_gpu_profile_browser.py
	cp test-artifacts/browser/05-run-succeeded.png docs/gpu-profile-grid.png
	cp test-artifacts/browser/06-task-gpu-profile.png docs/gpu-profile-task.png
	cp test-artifacts/browser/07-run-gpu-profile.png docs/gpu-profile-run.png

# Every test, end-to-end and the soak's slice included; the 15 slowest are listed at the end so that the
# cost stays visible. Six workers on two cores: one runs the end-to-end tests on the shared Airflow stack
# (tests/conftest.py keeps them together), one the soak's slice on its production-shaped stack (it starts
# first), four share the rest. Those wait more than they compute (retry pauses, emulator clocks,
# processes they start), so a worker more fills the cores: with the slice, make test took 7 min 18 s
# with five workers and 6 min 33 s with six (93 % of both cores busy), back to back (docs/soak.rst).
pytest: system-packages-test install
	$(BIN)/pytest -n 6 --durations=15

test: system-packages-test lint typecheck docs pytest

# The inner loop: unit and emulator-API tests, no Airflow process, browser or training (the `slow`
# marker, which tests/programs.py enforces), in under a minute on 2 cores. Six workers on two cores:
# the emulator tests mostly wait on their emulators' clocks, and each worker pays about 5 s of CPU to
# import and collect the suite; measured back to back, 3 workers took 78 s, 4 took 72 s, 5 took 62 s,
# 6 took 58 s and 8 took 70 s. tests/e2e is all `slow`: not even imported. The quick Hypothesis profile
# tries a fifth of the examples, the same ones each run (tests/properties.py).
test-quick: install
	$(BIN)/pytest -m "not slow" -q -n 6 --ignore=tests/e2e --hypothesis-profile=quick --durations=10

# The floor: every deferrable scenario and the triggers' tests against the oldest Airflow the provider
# supports (3.2.0), in a virtual environment of its own. Not part of `make test` (it installs a second
# Airflow and runs the deferrable end-to-end scenarios again: about 5 minutes more on 2 cores).
FLOOR_VENV := .venv-floor
FLOOR_TESTS := tests/triggers tests/operators/test_batch_operator_deferred.py tests/e2e -k "(deferrable or trigger) and not browser and not batch_on_emulator"
$(FLOOR_VENV)/.installed-floor: $(BIN)/python pyproject.toml tools/airflow-floor-constraints.txt
	$(SYSTEM_PACKAGES) venv
	$(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install --quiet --upgrade pip uv
	$(FLOOR_VENV)/bin/python -m pip install --quiet "torch==2.13.0"
	$(FLOOR_VENV)/bin/uv pip install --python $(FLOOR_VENV)/bin/python --quiet --compile-bytecode \
		-e ".[test]" -c tools/airflow-floor-constraints.txt
	touch $@

test-floor: system-packages-test $(FLOOR_VENV)/.installed-floor
	PATH=$(CURDIR)/$(FLOOR_VENV)/bin:$$PATH $(FLOOR_VENV)/bin/pytest -n 2 $(FLOOR_TESTS)

# The production soak (docs/soak.rst): PostgreSQL, Redis, CeleryExecutor with 2 workers, 2 triggerers and
# the emulators, FAULTS seeded faults over MINUTES (at most 30), every invariant judged over the whole
# history; report in .soak/report.html. SEED= replays a seed. Not part of `make test`.
SEED ?=
FAULTS ?= 1000
MINUTES ?= 20
soak: install
	@$(SYSTEM_PACKAGES) soak
	$(BIN)/python -m airflow_gpu.testing.soak $(if $(SEED),--seed $(SEED)) --faults $(FAULTS) --minutes $(MINUTES)

bench: install
	$(BIN)/python bench/import_time.py
	$(BIN)/python bench/emulator_throughput.py
	$(BIN)/python bench/dag_parse_time.py
	$(BIN)/python bench/batch_polling.py
	$(BIN)/python bench/profiling_sampler.py
	$(BIN)/python bench/report_render.py

clean:
	rm -rf $(VENV) $(FLOOR_VENV) docs/_build .pytest_cache .mypy_cache .ruff_cache .hypothesis .demo .emulator .soak
