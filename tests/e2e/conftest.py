"""The end-to-end tests' shared parts: one real Airflow stack for the whole session, the scenario
runs launched on it at once (tests/e2e/scenarios.py), and a migrated home for ``airflow dags test``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from airflow_gpu.testing.airflow_stack import AirflowStack
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.postgres import PostgresServer
from tests.e2e.scenarios import STACK_DAGS, Scenario, ScenarioLauncher, ScenarioRun

if TYPE_CHECKING:
    from tests.e2e.test_gpu_kubernetes_operator import Disrupter

SCENARIOS = pytest.StashKey[list[Scenario]]()
BIN = Path(sys.executable).parent
# The scenario tasks mostly wait on their emulators, so more of them than cores run side by side.
STACK_PARALLELISM = 8
#: A viewer of the shared stack who may read ``gpu_fanout`` only.
OUTSIDER = "outsider"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test of the shared stack shows the end of the api-server's and scheduler's logs: an
    "Internal Server Error" in the browser or the REST API says nothing of its cause, and the stack's
    home does not outlive the run (CI keeps the test output only)."""
    report = yield
    funcargs = getattr(item, "funcargs", {})
    if report.failed and "airflow_stack" in funcargs:
        stack = funcargs["airflow_stack"][0]
        for part in ("api-server", "scheduler"):
            report.sections.append((f"{part} log (last lines)", stack.log_tail(part)))
    return report


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("airflow-home")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(STACK_DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    return env


@pytest.fixture(scope="session")
def stack_batch_emulator() -> Iterator[BatchEmulator]:
    """The AWS Batch emulator the shared stack's ``aws_default`` points at."""
    with BatchEmulator(stop_timeout=5) as batch:
        yield batch


@pytest.fixture(scope="session")
def stack_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The shared stack's metadata database: PostgreSQL, as users run it. On SQLite the stack's
    forty-odd concurrent scenario tasks met "database is locked", which once stopped the scheduler
    and so every scenario with it (testing/postgres.py)."""
    with PostgresServer(tmp_path_factory.mktemp("postgres")) as server:
        yield server.url


@pytest.fixture(scope="session")
def airflow_stack(
    tmp_path_factory: pytest.TempPathFactory, stack_batch_emulator: BatchEmulator, stack_database: str
) -> Iterator[tuple[AirflowStack, KubernetesEmulator]]:
    """One real Airflow (api-server, scheduler, dag-processor, triggerer) on free ports and PostgreSQL,
    whose ``kubernetes_default`` points at one emulator; shared by the REST end-to-end tests, torn
    down (every process group) at the end of the session, whatever happened."""
    import json
    import shutil

    root = tmp_path_factory.mktemp("stack")
    dags = root / "dags"  # the shipped example DAGs, the lifecycle and the scenario DAGs, side by side
    shutil.copytree(Path(__file__).resolve().parents[2] / "dags", dags, ignore=shutil.ignore_patterns("__pycache__"))
    for dag_file in STACK_DAGS.glob("*.py"):
        shutil.copy(dag_file, dags)
    config = root / "airflow-home" / "config"  # on every part's sys.path
    config.mkdir(parents=True)
    for module in ("dag_scoped_auth.py", "airflow_local_settings.py"):
        shutil.copy(Path(__file__).resolve().parent / "stack_config" / module, config)
    with KubernetesEmulator("demo") as emulator:
        emulator.write_kubeconfig(root / "kubeconfig")
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(emulator.kubeconfig_path)}}
        stack = AirflowStack(
            root / "airflow-home",
            dags,
            extra_env={
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": stack_database,
                # One api-server process answers every task's Execution API calls, the triggerer's, the
                # tests' polls and the browser, and checks each token against the revoked-token table:
                # with Airflow's 5 + 10 connections, a slow CI machine's burst (heartbeats of eight tasks,
                # XCom pushes) can leave a request waiting out the pool's 30 s and answering 500 (CI at
                # stop 33: every page of the browser test). Each part has a sync and an async engine: 4 parts
                # x 2 x 30 = 240 at most, under testing/postgres.py's 300.
                "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_SIZE": "10",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_MAX_OVERFLOW": "20",
                # apache/airflow#72716: the scheduler drained a deferring worker's executor event 18 s
                # after the deferral with forty-odd tasks on two cores; 10 s (the default) is for a
                # scheduler that keeps up (triggers/resume_dwell.py).
                "AIRFLOW__GPU__RESUME_DWELL_SECONDS": "30",
                "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(connection),
                "AIRFLOW_CONN_AWS_DEFAULT": stack_batch_emulator.airflow_connection_uri(),
                # A dead worker is noticed in ~30 s instead of 5 minutes (the worker-crash test).
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
                # The DAG files do not change during a session: parse each once, not every 30 s.
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
                # Eight workers starting at once on two busy cores can take longer than the default
                # 30 s to parse a DAG file; a timeout there reschedules the task, a retry in disguise.
                "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
                # A user who may read one DAG only: the GPU report pages answer it 403 elsewhere.
                "AIRFLOW__CORE__AUTH_MANAGER": "dag_scoped_auth.DagScopedAuthManager",
                "AIRFLOW_GPU_TEST_DAG_SCOPES": f"{OUTSIDER}=gpu_fanout",
            },
            users={OUTSIDER: "viewer"},
            parallelism=STACK_PARALLELISM,
        )
        with stack:
            yield stack, emulator


def pytest_collection_finish(session: pytest.Session) -> None:
    """Remember every scenario the selected tests name, to launch them all when the first e2e test runs."""
    session.config.stash[SCENARIOS] = [
        item.callspec.params["scenario_run"]
        for item in session.items
        if "scenario_run" in getattr(getattr(item, "callspec", None), "params", {})
    ]


@pytest.fixture(scope="session")
def scenario_launcher(
    request: pytest.FixtureRequest,
    airflow_stack: tuple[AirflowStack, KubernetesEmulator],
    stack_batch_emulator: BatchEmulator,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ScenarioLauncher]:
    shared = {"kubernetes": airflow_stack[1], "batch": stack_batch_emulator}
    launcher = ScenarioLauncher(airflow_stack[0], tmp_path_factory.mktemp("scenarios"), shared)
    try:
        launcher.launch(request.config.stash.get(SCENARIOS, []))
        yield launcher
    finally:
        launcher.close()


@pytest.fixture(autouse=True, scope="session")
def _scenarios_under_way(request: pytest.FixtureRequest) -> None:
    """The scenario runs, and ``airflow dags test`` in its own process, start with the first
    end-to-end test, whichever it is, so that they all run at once."""
    if request.config.stash.get(SCENARIOS, []):
        request.getfixturevalue("scenario_launcher")
    if any("dags_test_run" in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.getfixturevalue("dags_test_run")


class DagsTestRun:
    """``airflow dags test`` of one scenario DAG in a process of its own, against an emulator of its
    own with the injector the test names, started beside the scenarios; ``wait`` gives its output."""

    def __init__(self, env: dict[str, str], root: Path, dag_id: str, dag_file: Path, injector: Disrupter) -> None:
        self.root, self.injector = root, injector
        self.emulator = KubernetesEmulator("demo", job_backoff_seconds=1).start()
        self.emulator.kubeconfig_path = self.emulator.write_kubeconfig(root / "kubeconfig")
        injector.emulator = self.emulator
        injector.workdir = root  # a Disrupter: it releases the held workload there
        injector.start()
        conf = {"workdir": str(root), "kubeconfig": str(self.emulator.kubeconfig_path), "hold": True}
        # To a file, not a pipe: nobody reads a pipe until ``wait``, and a full one (64 KiB of task
        # log) would stop the run mid-way, holding its pod.
        self.output = root / "dags-test.out"
        with self.output.open("w") as out:
            self.process = subprocess.Popen(
                [str(BIN / "airflow"), "dags", "test", dag_id, "--conf", json.dumps(conf), "--dagfile-path",
                 str(dag_file)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

    def wait(self, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        try:
            self.process.wait(timeout=timeout)
        finally:
            self.injector.stop.set()
            self.injector.join(timeout=30)
        out = self.output.read_text(errors="replace")
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, out, "")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.injector.stop.set()
        self.emulator.stop()


@pytest.fixture(scope="session")
def dags_test_run(airflow_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[DagsTestRun]:
    """The deferrable preemption scenario through ``airflow dags test`` (``dag.test()``), as users run
    their DAGs against the emulator in their own tests: the trigger runs inline, in one process."""
    from tests.e2e.test_gpu_kubernetes_operator import Preempter

    run = DagsTestRun(
        airflow_env,
        tmp_path_factory.mktemp("dags-test"),
        "gpu_kubernetes_preempt_deferrable",
        STACK_DAGS / "gpu_kubernetes_scenarios.py",  # parse this file only
        Preempter(times=2),
    )
    try:
        yield run
    finally:
        run.close()


@pytest.fixture
def scenario_run(request: pytest.FixtureRequest, scenario_launcher: ScenarioLauncher) -> Iterator[ScenarioRun]:
    """The run of the scenario the test is parametrized with (``scenarios(...)``), ended; its
    emulator stops with the test, so that nothing of it keeps ticking through the tests after."""
    scenario: Scenario = request.param
    try:
        yield scenario_launcher.runs[scenario.dag_id].wait()
    finally:
        scenario_launcher.finish(scenario.dag_id)
