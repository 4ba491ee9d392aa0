"""Test-wide set-up: Airflow must never touch the developer's ``~/airflow``."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import hypothesis  # imported before Airflow: see the note below
import pytest

from tests import programs, shared_botocore_loader

REPO = Path(__file__).resolve().parent.parent

# hypothesis's pytest plugin imports hypothesis at session end when no test did; pytest then
# rewrites its asserts with ast.parse, which CPython 3.11.7 fails ("AST constructor recursion
# depth mismatch") once Airflow has run in the process. Importing it first sidesteps that.

# No per-example deadline: it is a wall-clock assertion, and on two cores shared by six workers and the
# soak's slice a pure function's example took 306 ms against the default 200 ms (a FlakyFailure in make
# test). Tests never assert wall-clock times; bench/ measures them.
hypothesis.settings.register_profile("suite", deadline=None)
hypothesis.settings.load_profile("suite")
# make test-quick (--hypothesis-profile=quick): a fifth of the examples (tests/properties.py), the
# same ones on every run, so that the inner loop is quick and a red run is red again unchanged.
hypothesis.settings.register_profile("quick", max_examples=20, derandomize=True, deadline=None)


def pytest_configure(config: pytest.Config) -> None:
    programs.install()
    shared_botocore_loader.install()
    # Importing airflow with AIRFLOW_HOME unset creates ~/airflow; SQLite needs an absolute path.
    home = Path(tempfile.mkdtemp(prefix="airflow-gpu-tests-"))
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home / 'airflow.db'}"
    # Triggers run in this process (and in `airflow dags test` beside it) fire at once: the resume dwell
    # (triggers/resume_dwell.py) guards a real scheduler's race, and here it only added 10 s to every
    # deferred test. It is set in this home's airflow.cfg, not the environment, so that an Airflow stack a
    # test starts (its own home) keeps the dwell users get, and a test may still set its own by environment.
    (home / "airflow.cfg").write_text("[gpu]\nresume_dwell_seconds = 0\n")
    os.environ.pop("AIRFLOW_CONFIG", None)  # a developer's own would be read instead of this home's
    # An empty trust store for this process and every one it starts (the Airflow stack, tasks): nothing
    # here speaks TLS (the emulators serve plain HTTP, the machine reaches no other host), yet every
    # ssl.create_default_context() without a CA file parses the system's 144 CAs, 40-50 ms of CPU. The
    # async Kubernetes client makes one per ApiClient, and a trigger makes an ApiClient per call: a
    # fifth of the trigger tests' CPU. A CA file given explicitly is still loaded as before.
    os.environ["SSL_CERT_FILE"] = str(home / "no-certificates.pem")
    (home / "no-certificates.pem").touch()
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    """From here to the end of its teardown, what starts a program is this test (``tests/programs.py``)."""
    programs.RECORDER.test = item.nodeid
    _yield_to_the_stack(item)
    return (yield)


_NICED = False


def _yield_to_the_stack(item: pytest.Item) -> None:
    """A worker's first test outside ``tests/e2e`` lowers that worker's CPU priority (and that of what it starts
    from then on): the shared Airflow stack, started by the worker that runs the end-to-end tests first, keeps
    the cores it needs while three workers' unit tests wait on their emulators beside it. Under ``-n 4`` a
    scenario's task once did not start within its 300 s while the scheduler's log stayed quiet; the unit
    tests only wait longer."""
    global _NICED
    if _NICED or "PYTEST_XDIST_WORKER" not in os.environ or _runs_a_stack(item):
        return
    _NICED = True
    os.nice(5)


def _runs_a_stack(item: pytest.Item) -> bool:
    """An end-to-end test (the shared stack) or the soak's slice (a production-shaped stack of its own)."""
    return item.path.is_relative_to(REPO / "tests" / "e2e") or item.get_closest_marker("soak") is not None


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Fail the test that started a program a fresh machine lacks, or, outside ``slow``, started
    Airflow, a browser or a training run."""
    result = yield
    started = programs.RECORDER.take(item.nodeid)
    programs.RECORDER.test = programs.BETWEEN_TESTS
    problems = [programs.outside_the_install(s) for s in started]
    if item.get_closest_marker("slow") is None:
        slow = [why for s in started if s.test == item.nodeid and (why := programs.too_slow_for_quick(s))]
        problems += [f"{why}, but is not marked slow: make test-quick must not" for why in slow]
    problems = list(dict.fromkeys(p for p in problems if p))
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
    return result


#: Test modules whose module-scoped fixture starts a Batch emulator (a moto server, its EC2 backend,
#: job processes) or builds the docs site and starts a browser on it: one worker runs each of them
#: whole, so that it starts once, not once per worker (the site's build was 47 s a worker, loaded).
ONE_WORKER_PER_MODULE = ("tests/testing/batch/", "tests/hooks/test_batch_hook.py", "tests/docs/test_site.py")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection imported (Airflow, the providers, botocore's models, moto): the cyclic
    garbage collector then stops walking those millions of long-lived objects at every full
    collection, about a tenth of a worker's CPU in the emulator tests. The tests' own objects are
    collected as before."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Where the end-to-end tests go, and in which order.

    With pytest-xdist (``make test`` runs ``-n 4``) they are one unit of work (below), run first by
    one worker on the one shared Airflow stack while the other workers run the unit tests: the
    stack mostly waits on its emulators, so they overlap instead of adding up. Without xdist
    they go last: the stack lives until the session ends, and its scheduler would otherwise keep a
    core busy through every unit test after them.

    Among them, the tests that read a scenario run (``tests/e2e/scenarios.py``: all launched at
    once when the first of them starts; the crashes and clicks they need are done by injectors
    while the others run, and ``airflow dags test`` runs in a process of its own beside them) go
    first, and the few that drive the UI (a browser, the report pages) after them, on a stack that
    is no longer saturated: run beside the scenarios on two cores, the browser's timeouts fired.
    """
    e2e = REPO / "tests" / "e2e"
    distributed = "PYTEST_XDIST_WORKER" in os.environ

    def place(item: pytest.Item) -> tuple[bool, bool, bool]:
        in_e2e = item.path.is_relative_to(e2e)
        reads_a_scenario = "scenario_run" in getattr(item, "fixturenames", ())
        return in_e2e != distributed, item.get_closest_marker("soak") is None, not reads_a_scenario

    items.sort(key=place)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's load scheduling, with every end-to-end test in one scope: one worker, one stack.

    (``xdist_group`` markers would say the same, but with pytest 9 xdist 3.8 can no longer rename
    the tests' node ids, which is how ``--dist loadgroup`` groups them.)
    """
    from xdist.scheduler import LoadScopeScheduling

    class EndToEndTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith("tests/e2e/"):
                return "tests/e2e"
            module = nodeid.split("::", 1)[0]
            return module if module.startswith(ONE_WORKER_PER_MODULE) else nodeid

    return EndToEndTogether(config, log)
