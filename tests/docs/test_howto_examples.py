"""The getting-started page and the how-to guides (docs/getting-started.rst, docs/howto/) show only
files that are run or checked here or elsewhere: DAG files under dags/ (the demo and the end-to-end
tests run them) and docs/examples/, which these tests parse with Airflow's DagBag, as the DAG
processor does, and hold to what the pages say of them. The CI example is run as a user's CI runs it:
``airflow db migrate``, then pytest on the file, against the emulators, in processes of their own.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import metadata, version
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.docs.site import DOCS, REPO

EXAMPLES = DOCS / "examples"
DAGS = EXAMPLES / "dags"
PAGES = [DOCS / "getting-started.rst", *sorted((DOCS / "howto").glob("*.rst"))]
#: The provider's own metadata, from pyproject.toml as installed: requires-python and the extras.
PROVIDER = metadata("airflow-provider-gpu")
#: The oldest Airflow supported, as ``make test-floor`` installs it.
FLOOR = next(
    line.split("==")[1]
    for line in (REPO / "tools" / "airflow-floor-constraints.txt").read_text().splitlines()
    if line.startswith("apache-airflow==")
)


@pytest.fixture(autouse=True)
def _no_bytecode_in_docs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsing the examples must not leave ``__pycache__`` in docs/ (the site would look stale to
    tests/docs/site.py, and they would show as untracked files)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


@pytest.fixture(scope="module")
def dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    before, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        return DagBag(dag_folder=str(DAGS))
    finally:
        sys.dont_write_bytecode = before


def _included(page: Path) -> list[Path]:
    names = re.findall(r"^\s*\.\. literalinclude:: (\S+)", page.read_text(), re.M)
    return [(page.parent / name).resolve() for name in names]


def test_every_code_block_of_the_pages_is_an_included_file_that_is_run_or_checked() -> None:
    for page in PAGES:
        text = page.read_text()
        assert ".. code-block::" not in text and ".. code::" not in text, page.name
        # A literal block ("::" ending a paragraph) would be a hand-copied snippet too.
        literal = [line for line in text.splitlines() if line.rstrip().endswith("::") and ".. " not in line]
        assert literal == [], page.name
        for path in _included(page):
            assert path.is_file(), f"{page.name} includes {path}, which does not exist"
            assert path.is_relative_to(REPO / "dags") or path.is_relative_to(EXAMPLES), (page.name, path)
    shown = {path for page in PAGES for path in _included(page)}
    mine = {p.resolve() for p in EXAMPLES.rglob("*") if p.is_file() and "comparison" not in p.parts}
    mine = {p for p in mine if "__pycache__" not in p.parts}
    assert mine <= shown, f"examples no page shows: {sorted(map(str, mine - shown))}"


def test_every_example_dag_parses(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == {"first_gpu_task", "pinned_image", "gpu_use_check"}


def test_the_first_gpu_task_asks_for_one_l4_on_kubernetes_default(dagbag: Any) -> None:
    from kubernetes.client import ApiClient

    from airflow_gpu.images.selection import select_image

    task = dagbag.dags["first_gpu_task"].get_task("hello_gpu")
    assert task.kubernetes_conn_id == "kubernetes_default"  # what getting-started says it reads
    assert task.gpu_profile  # profiled without asking: an NVIDIA GPU
    pod = ApiClient().sanitize_for_serialization(task.build_pod_request_obj(dry_run=True))
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["image"] == select_image("L4").reference


def test_the_pinned_image_is_kept_and_checked_against_the_driver(dagbag: Any) -> None:
    from airflow_gpu.images.selection import ImageError, select_image
    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

    task = dagbag.dags["pinned_image"].get_task("train")
    pinned = _module(DAGS / "pinned_image.py")
    assert task.images == (pinned.IMAGE, pinned.IMAGE)  # on both candidates, never replaced
    # The how-to says the pin is what `airflow-gpu images --accelerator L4 --driver 550` prints today.
    assert select_image("L4", driver_version=pinned.NODE_DRIVER).reference == pinned.IMAGE
    # ...and that a CUDA the nodes' driver cannot run fails when the DAG is parsed.
    with pytest.raises(ImageError, match=r"driver 550 supports CUDA <= 12\.4; the image has CUDA 12\.8"):
        GPUKubernetesOperator(
            task_id="t", accelerator="L4", image="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
            driver_version=pinned.NODE_DRIVER, cmds=["true"],
        )  # fmt: skip


class _Ti:
    """What ``check_gpu_use`` asks of its task instance: the training's ``gpu_profile``."""

    def __init__(self, profile: dict[str, Any] | None) -> None:
        self.profile = profile

    def xcom_pull(self, task_ids: str, key: str) -> dict[str, Any] | None:
        assert (task_ids, key) == ("train", "gpu_profile")
        return self.profile


def _gpu(gpu: int, **fields: Any) -> dict[str, Any]:
    """One GPU's summary as the profiler writes it: an A10G, 10 minutes at 1 Hz, busy."""
    busy = {
        "gpu": gpu, "uuid": f"GPU-{gpu}", "name": "NVIDIA A10G", "samples": 600, "seconds": 599.0,
        "util_mean": 85.0, "util_p95": 98.0, "fb_peak": 18_000.0, "fb_total": 23_028.0, "power_mean": 250.0,
        "power_peak": 300.0, "energy_wh": 40.0, "energy_source": "counter", "idle_fraction": 0.02,
    }  # fmt: skip
    return {**busy, **fields}


def test_the_gpu_use_check_fails_a_run_whose_report_says_gpus_idled(dagbag: Any) -> None:
    from airflow_gpu.profiling.advice import advise

    check = dagbag.dags["gpu_use_check"].get_task("check_gpu_use").python_callable
    idle = {"util_mean": 0.3, "util_p95": 1.0, "idle_fraction": 0.99, "fb_peak": 500.0}
    one_of_four = [_gpu(0), _gpu(1, **idle), _gpu(2, **idle), _gpu(3, **idle)]
    profile = {"advice": [a.to_json() for a in advise(one_of_four, "A10G:4")]}
    with pytest.raises(ValueError, match="the GPUs were not used: .*used 1 of 4 GPUs"):
        check(ti=_Ti(profile))
    all_busy = {"advice": [a.to_json() for a in advise([_gpu(i) for i in range(4)], "A10G:4")]}
    assert check(ti=_Ti(all_busy)) is None
    assert check(ti=_Ti(None)) is None  # not profiled: nothing to enforce


def _module(path: Path) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dockerfile_installs_a_supported_airflow_with_existing_extras() -> None:
    text = (EXAMPLES / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    image = re.search(r"^FROM apache/airflow:(\S+)-python(\S+)$", text, re.M)
    assert image is not None
    assert image.groups() == (args["AIRFLOW_VERSION"], args["PYTHON_VERSION"])  # the image's own Airflow
    # The newest Airflow the suite runs on is the one installed here; the floor is make test-floor's.
    assert args["AIRFLOW_VERSION"] == version("apache-airflow")
    assert Version(args["AIRFLOW_VERSION"]) >= Version(FLOOR)
    assert Version(args["PYTHON_VERSION"] + ".0") in SpecifierSet(PROVIDER["Requires-Python"])
    extras = re.search(r'"airflow-provider-gpu\[([\w,-]+)\]"', text)
    assert extras is not None
    assert set(extras.group(1).split(",")) <= set(PROVIDER.get_all("Provides-Extra"))
    assert '"apache-airflow==${AIRFLOW_VERSION}"' in text
    # Airflow's documented constraints address (airflow.apache.org, "Installation from PyPI").
    assert (
        '--constraint "https://raw.githubusercontent.com/apache/airflow/'
        'constraints-${AIRFLOW_VERSION}/constraints-${PYTHON_VERSION}.txt"' in text
    )


def test_the_connections_are_what_the_operators_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    from airflow_gpu.operators.batch import GPUBatchOperator
    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

    exports = re.findall(r"^export (AIRFLOW_CONN_\w+)=(.+)$", (EXAMPLES / "connections.sh").read_text(), re.M)
    assert [name for name, _ in exports] == ["AIRFLOW_CONN_KUBERNETES_DEFAULT", "AIRFLOW_CONN_AWS_DEFAULT"]
    for name, value in exports:
        (unquoted,) = shlex.split(value)
        monkeypatch.setenv(name, unquoted)
    kubernetes = KubernetesHook()  # kubernetes_default
    assert kubernetes._get_field("in_cluster") is True and kubernetes.get_namespace() == "gpu-tasks"
    assert AwsBaseHook(client_type="batch").conn_config.region_name == "us-east-1"  # aws_default
    # The defaults the page names, on the operators themselves.
    pod = GPUKubernetesOperator(task_id="pod", accelerator="L4", cmds=["true"])
    job = GPUBatchOperator(task_id="job", accelerator="L4", command=["true"], job_queue="q")
    assert (pod.kubernetes_conn_id, job.aws_conn_id) == ("kubernetes_default", "aws_default")


def test_the_connections_namespace_is_the_one_the_shipped_rbac_binds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pods sent where the page's connection sends them are allowed there by docs/permissions: the tasks'
    Role and RoleBinding, and nothing else, grant pods, pods/log, jobs... in one namespace."""
    import yaml
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    exports = (EXAMPLES / "connections.sh").read_text()
    (value,) = re.findall(r"^export AIRFLOW_CONN_KUBERNETES_DEFAULT=(.+)$", exports, re.M)
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", shlex.split(value)[0])
    namespace = KubernetesHook().get_namespace()
    rbac = list(yaml.safe_load_all((DOCS / "permissions" / "kubernetes-tasks.yaml").read_text()))
    namespaced = {(doc["kind"], doc["metadata"]["namespace"]) for doc in rbac if doc["kind"] in {"Role", "RoleBinding"}}
    assert {kind for kind, _ in namespaced} == {"Role", "RoleBinding"}
    assert {ns for _, ns in namespaced} == {namespace}, (namespace, namespaced)


@pytest.mark.slow
def test_the_ci_example_passes_against_the_emulators(tmp_path: Path) -> None:
    """As the how-to's CI job runs it: its own Airflow home and metadata database, then pytest."""
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONDONTWRITEBYTECODE": "1",  # nothing written into docs/
        # A CI runner's pace is not what this test checks: beside the suite's two Airflow stacks, a DAG file's
        # parse in a lowered-priority process once took past the default 30 s and failed as an import error.
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "300",
    }
    env.pop("AIRFLOW_CONN_KUBERNETES_DEFAULT", None)
    env.pop("AIRFLOW_CONN_AWS_DEFAULT", None)
    python = sys.executable
    migrate = subprocess.run(
        [python, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    # Outside this repository's pytest configuration, as in a user's own repository.
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(tmp_path / "pytest.ini")]
    # 26 s alone; in a make test on a slow day, beside the soak's slice and the e2e stack, past 300 s.
    run = subprocess.run(
        [*command, "--rootdir", str(tmp_path), str(EXAMPLES / "ci" / "test_gpu_dags.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert "2 passed" in run.stdout
