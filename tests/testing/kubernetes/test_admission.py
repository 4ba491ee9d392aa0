"""ResourceQuota and LimitRange admission and the Job controller's ``FailedCreate``, through the
unmodified ``kubernetes`` client.

Expectations are the API server's code: ``CheckRequest`` and ``prettyPrint`` of
``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go`` ("exceeded quota:
%s, requested: %s, used: %s, limited: %s"), the pod evaluator of ``pkg/quota/v1/evaluator/core/pods.go``
(extended resources count only as ``requests.<name>``; cpu/memory quotas make every container state
them), ``plugin/pkg/admission/limitranger/admission.go`` (defaults, "maximum %s usage per %s is %s,
but limit is %s"), ``admission.NewForbidden`` (``pods "<name>" is forbidden: ...``) and
``pkg/controller/job``: a refused create is a ``FailedCreate`` Warning event "Error creating: ...",
the Job gets no condition, and the sync is retried with back-off until the pod is admitted.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from airflow_gpu.testing.kubernetes.admission import Quantity
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.testing.kubernetes.conftest import wait_for

SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    """A namespace of the test's own: quotas and LimitRanges apply to one namespace."""
    name = f"admission-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: core.read_namespaced_service_account("default", name))
    yield name


def gpu_pod(name: str, gpus: int = 1, **resources: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus), **resources.pop("limits", {})}
    container = {
        "name": "train",
        "image": "simulated.local/train",
        "resources": {"limits": limits, **({"requests": resources["requests"]} if "requests" in resources else {})},
    }
    return {
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "tolerations": [{"operator": "Exists"}], "containers": [container]},
    }


def forbidden(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 403
    body: dict[str, Any] = json.loads(caught.value.body)
    assert body["reason"] == "Forbidden"
    return body


def quota(core: client.CoreV1Api, namespace: str, name: str, hard: dict[str, str]) -> None:
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": name}, "spec": {"hard": hard}})
    wait_for(lambda: (core.read_namespaced_resource_quota(name, namespace).status.used is not None) or None)


def test_quantities_print_as_resource_quantity_string() -> None:
    """``Quantity.String``'s canonical forms, and ``Add`` keeping the format of the non-zero side."""
    assert [str(Quantity.parse(t)) for t in ("1.5Gi", "0.5", "2000", "1500", "512", "1024Mi", "0")] == [
        "1536Mi", "500m", "2k", "1500", "512", "1Gi", "0",
    ]  # fmt: skip
    assert str(Quantity.parse("0") + Quantity.parse("1Gi")) == "1Gi"
    assert str(Quantity.parse("500m") + Quantity.parse("1")) == "1500m"


def test_gpu_quota_refuses_the_pod_over_it_with_the_api_servers_message(core: client.CoreV1Api, namespace: str) -> None:
    quota(core, namespace, "gpus", {"requests.nvidia.com/gpu": "4", "pods": "10"})
    core.create_namespaced_pod(namespace, gpu_pod("a", 3))
    body = forbidden(lambda: core.create_namespaced_pod(namespace, gpu_pod("b", 2)))
    assert body["message"] == (
        'pods "b" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=2, '
        "used: requests.nvidia.com/gpu=3, limited: requests.nvidia.com/gpu=4"
    )
    assert body["details"] == {"name": "b", "kind": "pods"}
    core.create_namespaced_pod(namespace, gpu_pod("c", 1))  # exactly at the limit is allowed
    status = wait_for(
        lambda: ((s := core.read_namespaced_resource_quota("gpus", namespace).status).used["pods"] == "2" and s) or None
    )
    assert status.hard == {"requests.nvidia.com/gpu": "4", "pods": "10"}
    assert status.used == {"requests.nvidia.com/gpu": "4", "pods": "2"}


def test_quota_on_the_bare_extended_resource_name_enforces_nothing(core: client.CoreV1Api, namespace: str) -> None:
    """Only ``requests.<extended>`` is counted (``isExtendedResourceNameForQuota``): ``nvidia.com/gpu``
    is a valid name for the quota's validation, but no evaluator matches it."""
    quota(core, namespace, "bare", {"nvidia.com/gpu": "1"})
    core.create_namespaced_pod(namespace, gpu_pod("a", 2))
    assert core.read_namespaced_resource_quota("bare", namespace).status.used in (None, {})


def test_pod_count_and_cpu_quota_messages(core: client.CoreV1Api, namespace: str) -> None:
    quota(core, namespace, "compute", {"pods": "1", "requests.cpu": "1", "limits.memory": "1Gi"})
    no_memory_limit = gpu_pod("a", 1, limits={"cpu": "500m"})
    body = forbidden(lambda: core.create_namespaced_pod(namespace, no_memory_limit))
    assert body["message"] == 'pods "a" is forbidden: failed quota: compute: must specify limits.memory for: train'
    core.create_namespaced_pod(namespace, gpu_pod("b", 1, limits={"cpu": "500m", "memory": "512Mi"}))
    body = forbidden(
        lambda: core.create_namespaced_pod(namespace, gpu_pod("c", 1, limits={"cpu": "600m", "memory": "768Mi"}))
    )
    assert body["message"] == (
        'pods "c" is forbidden: exceeded quota: compute, requested: limits.memory=768Mi,pods=1,requests.cpu=600m, '
        "used: limits.memory=512Mi,pods=1,requests.cpu=500m, limited: limits.memory=1Gi,pods=1,requests.cpu=1"
    )


def test_count_of_jobs_refuses_the_job(core: client.CoreV1Api, batch: client.BatchV1Api, namespace: str) -> None:
    quota(core, namespace, "jobs", {"count/jobs.batch": "1"})
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "simulated.local/x"}]}}
    batch.create_namespaced_job(namespace, {"metadata": {"name": "one"}, "spec": {"template": template}})
    body = forbidden(
        lambda: batch.create_namespaced_job(namespace, {"metadata": {"name": "two"}, "spec": {"template": template}})
    )
    assert body["message"] == (
        'jobs.batch "two" is forbidden: exceeded quota: jobs, requested: count/jobs.batch=1, '
        "used: count/jobs.batch=1, limited: count/jobs.batch=1"
    )


def test_a_terminal_pod_no_longer_counts(core: client.CoreV1Api, namespace: str, kubernetes_emulator: Any) -> None:
    quota(core, namespace, "gpus", {"requests.nvidia.com/gpu": "1"})
    core.create_namespaced_pod(namespace, gpu_pod("a", 1))
    wait_for(lambda: core.read_namespaced_pod("a", namespace).status.phase == "Running" or None)
    forbidden(lambda: core.create_namespaced_pod(namespace, gpu_pod("b", 1)))
    kubernetes_emulator.finish("a", namespace=namespace)
    wait_for(lambda: core.read_namespaced_pod("a", namespace).status.phase == "Succeeded" or None)
    core.create_namespaced_pod(namespace, gpu_pod("b", 1))


def test_quota_resource_names_are_validated(core: client.CoreV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "q"}, "spec": {"hard": {"gpu": "1"}}})
    assert caught.value.status == 422
    assert "must be a standard resource for quota" in json.loads(caught.value.body)["message"]


def test_limit_range_defaults_and_refuses(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_limit_range(
        namespace,
        {
            "metadata": {"name": "limits"},
            "spec": {
                "limits": [
                    {"type": "Container", "max": {"nvidia.com/gpu": "1"}, "defaultRequest": {"cpu": "250m"}},
                ]
            },
        },
    )
    body = forbidden(lambda: core.create_namespaced_pod(namespace, gpu_pod("big", 2)))
    assert body["message"] == 'pods "big" is forbidden: maximum nvidia.com/gpu usage per Container is 1, but limit is 2'
    pod = core.create_namespaced_pod(namespace, gpu_pod("small", 1))
    assert pod.spec.containers[0].resources.requests == {"nvidia.com/gpu": "1", "cpu": "250m"}
    assert pod.metadata.annotations["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu request for container train"
    )
    # ``SetDefaults_LimitRangeItem``: the default limit is the max, so a pod without GPUs gets one
    plain = {"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "c", "image": "simulated.local/c"}]}}
    defaulted = core.create_namespaced_pod(namespace, plain)
    assert defaulted.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}


def test_limit_range_ratio_and_several_violations(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_limit_range(
        namespace,
        {
            "metadata": {"name": "ratio"},
            "spec": {"limits": [{"type": "Container", "min": {"cpu": "1"}, "maxLimitRequestRatio": {"cpu": "2"}}]},
        },
    )
    pod = gpu_pod("p", 1, limits={"cpu": "4"}, requests={"cpu": "500m"})
    body = forbidden(lambda: core.create_namespaced_pod(namespace, pod))
    assert body["message"] == (
        'pods "p" is forbidden: [minimum cpu usage per Container is 1, but request is 500m, '
        "cpu max limit to request ratio per Container is 2, but provided ratio is 8.000000]"
    )


def test_job_whose_pods_are_refused_records_failed_create_and_retries(
    core: client.CoreV1Api, batch: client.BatchV1Api, namespace: str, kubernetes_emulator: KubernetesEmulator
) -> None:
    """Two of four ranks fit the quota: the controller creates them (slow start: 1, then 2, the second of
    which is refused), records ``FailedCreate`` with the generated pod name, sets no condition, and
    creates the missing ranks once the quota is raised."""
    assert kubernetes_emulator.state is not None
    kubernetes_emulator.state.jobs.api_backoff_seconds = 0.2
    quota(core, namespace, "gpus", {"requests.nvidia.com/gpu": "2"})
    template = gpu_pod("ignored", 1)["spec"]
    job = {
        "metadata": {"name": "train"},
        "spec": {
            "completionMode": "Indexed", "completions": 4, "parallelism": 4, "backoffLimit": 0,
            "template": {"spec": template},
        },
    }  # fmt: skip
    batch.create_namespaced_job(namespace, job)

    def refusals() -> list[client.CoreV1Event] | None:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=train").items
        failed = [e for e in events if e.reason == "FailedCreate"]
        return failed if len(failed) >= 2 else None  # the first sync's, then a retry's

    failed = wait_for(refusals)
    assert failed[0].type == "Warning"
    assert re.fullmatch(
        rf'Error creating: pods "train-[0-3]-{SUFFIX}" is forbidden: exceeded quota: gpus, '
        r"requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=2",
        failed[0].message,
    ), failed[0].message
    assert len(core.list_namespaced_pod(namespace).items) == 2
    assert not batch.read_namespaced_job("train", namespace).status.conditions
    core.patch_namespaced_resource_quota("gpus", namespace, {"spec": {"hard": {"requests.nvidia.com/gpu": "4"}}})

    def all_ranks() -> list[client.V1Pod] | None:
        items = core.list_namespaced_pod(namespace).items
        return items if len(items) == 4 else None

    pods = wait_for(all_ranks)
    assert sorted(p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1", "2", "3"]
