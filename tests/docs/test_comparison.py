"""The comparison page's worked example (docs/comparison.rst, docs/examples/comparison/).

The three Airflow versions are parsed by Airflow's DagBag, as a scheduler would, and what each asks
the platform for is read from what it would send: the pod (Kubernetes' GPU resource name, GPU
feature discovery's product label, the capacity type) and the AWS Batch requests (checked against
botocore's model of the Batch API, the shapes AWS documents). The Metaflow, Flyte and SkyPilot
versions are not run (none of those tools is installed): each is parsed, and the decorator
arguments and YAML fields it uses must be ones their documentation lists, so a made-up parameter
fails here rather than misleading a reader.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import botocore.session
import pytest
import yaml
from botocore.validate import ParamValidator

from tests.docs.site import DOCS

EXAMPLES = DOCS / "examples" / "comparison"
PAGE = DOCS / "comparison.rst"
IMAGE = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
A100_40GB = "NVIDIA-A100-SXM4-40GB"  # GPU feature discovery's nvidia.com/gpu.product for it

#: ``@kubernetes`` parameters, from Metaflow's KubernetesDecorator.defaults
#: (https://docs.metaflow.org/api/step-decorators/kubernetes).
METAFLOW_KUBERNETES = {
    "cpu", "memory", "disk", "image", "image_pull_policy", "image_pull_secrets", "service_account", "secrets",
    "node_selector", "namespace", "gpu", "gpu_vendor", "tolerations", "labels", "annotations", "use_tmpfs",
    "tmpfs_tempdir", "tmpfs_size", "tmpfs_path", "persistent_volume_claims", "shared_memory", "port",
    "compute_pool", "hostname_resolution_timeout", "qos", "security_context",
}  # fmt: skip
#: ``@task`` parameters, from flytekit's ``flytekit/core/task.py``.
FLYTE_TASK = {
    "task_config", "cache", "cache_serialize", "cache_version", "cache_ignore_input_vars", "retries",
    "interruptible", "deprecated", "timeout", "container_image", "environment", "requests", "limits",
    "secret_requests", "execution_mode", "node_dependency_hints", "task_resolver", "docs", "disable_deck",
    "enable_deck", "pod_template", "pod_template_name", "accelerator",
}  # fmt: skip
#: SkyPilot YAML ``resources`` fields and ``job_recovery`` keys and strategies
#: (https://docs.skypilot.co/en/latest/reference/yaml-spec.html).
SKYPILOT_RESOURCES = {
    "infra", "cloud", "region", "zone", "accelerators", "accelerator_args", "cpus", "memory", "instance_type",
    "use_spot", "disk_size", "disk_tier", "network_tier", "image_id", "ports", "labels", "autostop", "any_of",
    "ordered", "job_recovery",
}  # fmt: skip
SKYPILOT_RECOVERY = {"strategy", "max_restarts_on_errors", "recover_on_exit_codes"}
SKYPILOT_STRATEGIES = {"FAILOVER", "EAGER_NEXT_REGION"}


@pytest.fixture(autouse=True)
def _no_bytecode_in_docs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing the examples must not leave ``__pycache__`` in docs/ (it would make the built site
    look stale to tests/docs/site.py, and show as untracked files)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


def _dag(name: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLES / name))
    assert bag.import_errors == {}
    (dag,) = bag.dags.values()
    return dag


def _batch_errors(operation: str, params: dict[str, Any]) -> str:
    """What botocore's model of the Batch API says is wrong with ``params`` ('' when nothing)."""
    shape = botocore.session.get_session().get_service_model("batch").operation_model(operation).input_shape
    return str(ParamValidator().validate(params, shape).generate_report())


def _pod(task: Any) -> dict[str, Any]:
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(task.build_pod_request_obj(dry_run=True))  # type: ignore[no-any-return]


def _required_node_labels(pod: dict[str, Any]) -> dict[str, list[str]]:
    spec = pod["spec"]
    labels = {key: [value] for key, value in (spec.get("nodeSelector") or {}).items()}
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    for term in (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms", []):
        for expression in term.get("matchExpressions", []):
            labels[expression["key"]] = expression["values"]
    return labels


def test_the_page_includes_every_example_file() -> None:
    included = set(re.findall(r"\.\. literalinclude:: examples/comparison/(\S+)", PAGE.read_text()))
    assert included == {p.name for p in EXAMPLES.iterdir() if p.suffix in {".py", ".yaml"}}


def test_our_dag_asks_kubernetes_for_one_a100_40gb_on_spot_with_the_pinned_image() -> None:
    task = _dag("airflow_gpu_fine_tune.py").get_task("fine_tune_on_kubernetes")
    pod = _pod(task)
    container = pod["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    labels = _required_node_labels(pod)
    assert A100_40GB in labels["nvidia.com/gpu.product"]
    assert not any("80GB" in value for value in labels["nvidia.com/gpu.product"])
    assert labels["karpenter.sh/capacity-type"] == ["spot"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert pod["spec"]["terminationGracePeriodSeconds"] == task.spot.grace_period_seconds == 90
    assert (task.spot.max_interruptions, task.spot.fallback_to_on_demand) == (3, True)
    assert task.deferrable


def test_our_dag_registers_a_batch_job_definition_aws_accepts() -> None:
    from airflow_gpu.accelerators import batch_job
    from airflow_gpu.spot import batch as spot_batch

    task = _dag("airflow_gpu_fine_tune.py").get_task("fine_tune_on_batch")
    definition = batch_job.job_definition(
        task.images[0], task.placements[0], spot_batch.retry_strategy(task.spot), str(task.candidates[0]), None
    )
    assert _batch_errors("RegisterJobDefinition", {"jobDefinitionName": "fine-tune", **definition}) == ""
    assert definition["containerProperties"]["image"] == IMAGE
    assert {"type": "GPU", "value": "1"} in definition["containerProperties"]["resourceRequirements"]
    assert task.queues == {"spot": "gpu-spot", "on-demand": "gpu-on-demand"}
    assert task.job_queue == "gpu-spot" and task.deferrable


def test_the_kubernetes_pod_operator_version_asks_for_the_same_gpu() -> None:
    task = _dag("kpo_fine_tune.py").get_task("fine_tune")
    pod = _pod(task)
    container = pod["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert _required_node_labels(pod)["nvidia.com/gpu.product"] == [A100_40GB]
    assert _required_node_labels(pod)["karpenter.sh/capacity-type"] == ["spot"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert task.retries == 3 and task.deferrable


def test_the_batch_operator_version_sends_requests_aws_accepts() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("batch_fine_tune", EXAMPLES / "batch_fine_tune.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    definition = module.JOB_DEFINITION
    assert _batch_errors("RegisterJobDefinition", definition) == ""
    assert definition["containerProperties"]["image"] == IMAGE
    assert {"type": "GPU", "value": "1"} in definition["containerProperties"]["resourceRequirements"]

    task = _dag("batch_fine_tune.py").get_task("fine_tune")
    submit = {
        "jobName": task.job_name,
        "jobQueue": task.job_queue,
        "jobDefinition": task.job_definition,
        "containerOverrides": task.container_overrides,
        "retryStrategy": task.retry_strategy,
    }
    assert _batch_errors("SubmitJob", submit) == ""
    assert task.job_definition == definition["jobDefinitionName"] and task.deferrable


def _decorator_keywords(path: Path, decorator: str) -> set[str]:
    tree = ast.parse(path.read_text())
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == decorator
    ]
    assert calls, f"{path.name} has no @{decorator}(...)"
    return {keyword.arg for call in calls for keyword in call.keywords if keyword.arg}


def test_the_metaflow_version_uses_only_documented_kubernetes_parameters() -> None:
    used = _decorator_keywords(EXAMPLES / "metaflow_fine_tune.py", "kubernetes")
    assert used <= METAFLOW_KUBERNETES, used - METAFLOW_KUBERNETES
    assert {"gpu", "image", "node_selector"} <= used
    assert _decorator_keywords(EXAMPLES / "metaflow_fine_tune.py", "retry") == {"times"}


def test_the_flyte_version_uses_only_documented_task_arguments() -> None:
    used = _decorator_keywords(EXAMPLES / "flyte_fine_tune.py", "task")
    assert used <= FLYTE_TASK, used - FLYTE_TASK
    assert {"accelerator", "interruptible", "retries", "container_image"} <= used


def test_the_skypilot_version_uses_only_documented_fields() -> None:
    job = yaml.safe_load((EXAMPLES / "skypilot_fine_tune.yaml").read_text())
    resources = job["resources"]
    assert set(resources) <= SKYPILOT_RESOURCES, set(resources) - SKYPILOT_RESOURCES
    assert resources["accelerators"] == "A100:1"
    assert resources["image_id"] == f"docker:{IMAGE}"
    assert set(resources["job_recovery"]) <= SKYPILOT_RECOVERY
    assert resources["job_recovery"]["strategy"] in SKYPILOT_STRATEGIES
    assert [choice["use_spot"] for choice in resources["ordered"]] == [True, False]
