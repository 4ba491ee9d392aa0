"""Conformance: the emulator answers the unmodified client and ``KubernetesPodOperator`` as a cluster does.

Each test drives one feature a KPO user relies on and expects what Kubernetes documents (the API
reference's shapes, the API server's and kubelet's messages), so that it fails if the emulator
answers otherwise. ``Ti`` stands in for Airflow's task instance, as in test_cncf_job_operator.py;
everything else is KPO's own code talking to the emulator over HTTP.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from airflow_gpu.testing.kubernetes.cluster import ClusterSpec
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.kubernetes.images import pull_error
from tests.testing.kubernetes.conftest import phase_is, pod_manifest, wait_for
from tests.testing.kubernetes.official import context, kpo

MISSING_IMAGE = "registry.example.com/team/trainer:no-such-tag"
NODE_LABELS = ("kubernetes.io/os", "beta.kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/arch")


def _only_pod(core: client.CoreV1Api, selector: str) -> client.V1Pod:
    (pod,) = core.list_namespaced_pod("default", label_selector=selector).items
    return pod


@pytest.fixture
def missing_image_cluster(tmp_path: Any) -> Iterator[KubernetesEmulator]:
    """The demo nodes plus a cluster file's ``missing_images`` (an image no registry has)."""
    spec = ClusterSpec.load("demo")
    cluster = ClusterSpec(spec.name, spec.nodes, (MISSING_IMAGE,))
    with KubernetesEmulator(cluster) as emulator:
        emulator.write_kubeconfig(tmp_path / "kubeconfig")
        yield emulator


def _client(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))


# --- nodes: the labels every kubelet sets ------------------------------------------------------


def test_nodes_carry_the_kubelet_labels(core: client.CoreV1Api) -> None:
    nodes = core.list_node().items
    assert [n.metadata.name for n in nodes] == ["cpu-1", "gpu-on-demand-1", "gpu-spot-1", "gpu-spot-2"]
    for node in nodes:
        labels = node.metadata.labels
        assert labels["kubernetes.io/hostname"] == node.metadata.name
        assert [labels[key] for key in NODE_LABELS] == ["linux", "linux", "amd64", "amd64"]
        assert (node.status.node_info.operating_system, node.status.node_info.architecture) == ("linux", "amd64")


def test_a_cluster_file_sets_the_architecture(tmp_path: Any) -> None:
    cluster = ClusterSpec.from_dict({"nodes": [{"name": "graviton", "arch": "arm64"}, {"name": "x86"}]})
    with KubernetesEmulator(cluster) as emulator:
        emulator.write_kubeconfig(tmp_path / "kubeconfig")
        core = _client(emulator)
        graviton, x86 = (core.read_node(name) for name in ("graviton", "x86"))
        assert graviton.metadata.labels["kubernetes.io/arch"] == "arm64"
        assert graviton.metadata.labels["beta.kubernetes.io/arch"] == "arm64"
        assert graviton.status.node_info.architecture == "arm64"
        assert x86.metadata.labels["kubernetes.io/arch"] == "amd64"
    with pytest.raises(ValueError, match="arch must be one of"):
        ClusterSpec.from_dict({"nodes": [{"name": "n", "arch": "x86_64"}]})
    with pytest.raises(ValueError, match="unknown cluster keys"):
        ClusterSpec.from_dict({"nodes": [{"name": "n"}], "missing_image": ["x"]})


def test_an_affinity_on_arch_schedules_to_that_node(tmp_path: Any) -> None:
    cluster = ClusterSpec.from_dict({"nodes": [{"name": "graviton", "arch": "arm64"}, {"name": "x86"}]})
    term = {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    with KubernetesEmulator(cluster) as emulator:
        emulator.write_kubeconfig(tmp_path / "kubeconfig")
        core = _client(emulator)
        core.create_namespaced_pod("default", pod_manifest("arm", ["true"], affinity=affinity))
        assert wait_for(phase_is(core, "arm", "Succeeded")).spec.node_name == "graviton"


# --- deletecollection ---------------------------------------------------------------------------


def _raw(response: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(response.data)
    return data


def test_deletecollection_of_pods_honours_selectors_and_answers_the_list(core: client.CoreV1Api) -> None:
    for name, labels in (("a", {"batch": "one"}), ("b", {"batch": "one"}), ("c", {"batch": "two"})):
        core.create_namespaced_pod("default", pod_manifest(name, ["sleep", "30"], labels=labels))
    started = time.monotonic()  # pods still starting: a force delete does not wait for them to run
    answer = _raw(
        core.delete_collection_namespaced_pod(
            "default", label_selector="batch=one", grace_period_seconds=0, _preload_content=False
        )
    )
    assert (answer["kind"], answer["apiVersion"]) == ("PodList", "v1")
    assert sorted(item["metadata"]["name"] for item in answer["items"]) == ["a", "b"]
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["c"]  # gone when answered
    assert time.monotonic() - started < 10
    answer = _raw(
        core.delete_collection_namespaced_pod(
            "default", field_selector="metadata.name=c", grace_period_seconds=0, _preload_content=False
        )
    )
    assert [item["metadata"]["name"] for item in answer["items"]] == ["c"]
    assert core.list_namespaced_pod("default").items == []
    empty = _raw(core.delete_collection_namespaced_pod("default", _preload_content=False))
    assert (empty["kind"], empty["items"]) == ("PodList", [])


def test_deletecollection_with_a_grace_period_answers_the_pods_before_they_go(core: client.CoreV1Api) -> None:
    """The pod ignores SIGTERM, so it stays for the request's grace period (a ``sleep`` that SIGTERM
    ends would be gone as soon as it got it, before the pod could be read back)."""
    ignores_sigterm = ["sh", "-c", "trap '' TERM; echo ready; sleep 30"]
    core.create_namespaced_pod("default", pod_manifest("slow", ignores_sigterm, terminationGracePeriodSeconds=30))
    wait_for(phase_is(core, "slow", "Running"))
    wait_for(lambda: "ready" in core.read_namespaced_pod_log("slow", "default"))  # the trap is set
    answer = _raw(
        core.delete_collection_namespaced_pod(
            "default", body=client.V1DeleteOptions(grace_period_seconds=2), _preload_content=False
        )
    )
    assert [item["metadata"]["name"] for item in answer["items"]] == ["slow"]
    assert core.read_namespaced_pod("slow", "default").metadata.deletion_grace_period_seconds == 2
    wait_for(lambda: not core.list_namespaced_pod("default").items)


def test_deletecollection_of_jobs_takes_the_propagation_policy(
    core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    template = {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "command": ["sleep", "30"]}]}
    }
    batch.create_namespaced_job(
        "default", {"metadata": {"name": "train", "labels": {"team": "ml"}}, "spec": {"template": template}}
    )
    wait_for(lambda: core.list_namespaced_pod("default", label_selector="job-name=train").items)
    answer = _raw(
        batch.delete_collection_namespaced_job(
            "default", label_selector="team=ml", propagation_policy="Background", _preload_content=False
        )
    )
    assert (answer["kind"], answer["apiVersion"]) == ("JobList", "batch/v1")
    assert [item["metadata"]["name"] for item in answer["items"]] == ["train"]
    wait_for(lambda: not batch.list_namespaced_job("default").items)
    wait_for(lambda: not core.list_namespaced_pod("default", label_selector="job-name=train").items, timeout=60)


def test_deletecollection_of_nodes_and_services_and_its_refusals(core: client.CoreV1Api) -> None:
    answer = _raw(core.delete_collection_node(label_selector="kubernetes.io/hostname=cpu-1", _preload_content=False))
    assert answer["kind"] == "NodeList" and [i["metadata"]["name"] for i in answer["items"]] == ["cpu-1"]
    assert len(core.list_node().items) == 3
    core.create_namespaced_service("default", {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}})
    deleted = _raw(core.delete_collection_namespaced_service("default", _preload_content=False))
    assert deleted["kind"] == "ServiceList"
    assert {i["metadata"]["name"] for i in deleted["items"]} == {"svc", "kubernetes"}
    # the API server's kubernetesservice controller writes its ``kubernetes`` Service back
    assert [s.metadata.name for s in core.list_namespaced_service("default").items] in ([], ["kubernetes"])
    with pytest.raises(ApiException) as refused:  # the namespace registry has no DeleteCollection
        core.api_client.call_api("/api/v1/namespaces", "DELETE", auth_settings=["BearerToken"])
    assert refused.value.status == 405
    with pytest.raises(ApiException) as unknown_namespace:
        core.delete_collection_namespaced_pod("nowhere")
    assert unknown_namespace.value.status == 404


def test_discovery_lists_deletecollection(core: client.CoreV1Api) -> None:
    resources = {r.name: r for r in core.get_api_resources().resources}
    for name in ("pods", "services", "events", "nodes", "serviceaccounts"):
        assert "deletecollection" in resources[name].verbs, name
    assert "deletecollection" not in resources["namespaces"].verbs
    assert resources["serviceaccounts"].short_names == ["sa"] and resources["serviceaccounts"].namespaced


# --- DELETE with gracePeriodSeconds=0 -------------------------------------------------------------


def test_a_force_delete_answers_once_the_pod_is_gone(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_manifest("forced", ["sleep", "30"]))
    wait_for(phase_is(core, "forced", "Running"))
    core.delete_namespaced_pod("forced", "default", grace_period_seconds=0)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("forced", "default")
    assert gone.value.status == 404


# --- resource quantities given as null ------------------------------------------------------------


def test_a_null_quantity_is_decoded_as_zero(core: client.CoreV1Api) -> None:
    resources = client.V1ResourceRequirements(requests={"cpu": None, "memory": "64Mi"}, limits={"cpu": None})
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="nulls"),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[client.V1Container(name="base", image="busybox", command=["true"], resources=resources)],
        ),
    )
    created = core.create_namespaced_pod("default", pod)  # the client sends {"cpu": null}
    stored = created.spec.containers[0].resources
    assert (stored.requests, stored.limits) == ({"cpu": "0", "memory": "64Mi"}, {"cpu": "0"})
    wait_for(phase_is(core, "nulls", "Succeeded"))


# --- ServiceAccounts ----------------------------------------------------------------------------


def test_every_namespace_has_a_default_service_account(core: client.CoreV1Api) -> None:
    for namespace in ("default", "kube-system", "kube-public"):
        account = core.read_namespaced_service_account("default", namespace)
        assert (account.kind, account.metadata.namespace) == ("ServiceAccount", namespace)
    core.create_namespace({"metadata": {"name": "team-a"}})
    assert core.read_namespaced_service_account("default", "team-a").metadata.uid
    core.delete_namespaced_service_account("default", "team-a")  # the controller creates it again
    wait_for(lambda: core.list_namespaced_service_account("team-a").items)


def test_service_account_crud_and_pod_defaults(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_service_account("default", {"metadata": {"name": "builder", "labels": {"a": "b"}}})
    assert created.metadata.resource_version and created.metadata.creation_timestamp
    names = [a.metadata.name for a in core.list_namespaced_service_account("default", label_selector="a=b").items]
    assert names == ["builder"]
    core.patch_namespaced_service_account("builder", "default", {"metadata": {"labels": {"a": "c"}}})
    assert core.read_namespaced_service_account("builder", "default").metadata.labels == {"a": "c"}
    plain = core.create_namespaced_pod("default", pod_manifest("plain", ["true"]))
    assert (plain.spec.service_account_name, plain.spec.service_account) == ("default", "default")
    deprecated = core.create_namespaced_pod("default", pod_manifest("old", ["true"], serviceAccount="builder"))
    assert (deprecated.spec.service_account_name, deprecated.spec.service_account) == ("builder", "builder")


def test_a_pod_naming_a_missing_service_account_is_forbidden(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("default", pod_manifest("p", ["true"], serviceAccountName="nobody"))
    status = json.loads(refused.value.body)
    assert (refused.value.status, status["reason"], status["details"]) == (
        403,
        "Forbidden",
        {"name": "p", "kind": "pods"},
    )
    expected = (
        'pods "p" is forbidden: error looking up service account default/nobody: serviceaccount "nobody" not found'
    )
    assert status["message"] == expected
    generated = {
        "metadata": {"generateName": "gen-"},
        "spec": {**pod_manifest("x", ["true"])["spec"], "serviceAccountName": "nobody"},
    }
    with pytest.raises(ApiException) as unnamed:
        core.create_namespaced_pod("default", generated)
    assert json.loads(unnamed.value.body)["message"].startswith('pods "gen-" is forbidden: error looking up')


# --- images that do not exist -------------------------------------------------------------------


def test_a_missing_image_fails_to_pull_then_backs_off(missing_image_cluster: KubernetesEmulator) -> None:
    core = _client(missing_image_cluster)
    core.create_namespaced_pod("default", pod_manifest("pull", ["true"], container={"image": MISSING_IMAGE}))

    def waiting(reason: str) -> Any:
        pod = core.read_namespaced_pod("pull", "default")
        state = (pod.status.container_statuses or [None])[0]
        return pod if state is not None and state.state.waiting and state.state.waiting.reason == reason else None

    first = wait_for(lambda: waiting("ErrImagePull"))
    assert first.status.phase == "Pending"
    assert first.status.container_statuses[0].state.waiting.message == pull_error(MISSING_IMAGE)
    assert pull_error(MISSING_IMAGE) == (  # containerd's NotFound, through the CRI
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{MISSING_IMAGE}": '
        f'failed to resolve reference "{MISSING_IMAGE}": {MISSING_IMAGE}: not found'
    )
    assert pull_error("busybox").endswith(
        '"docker.io/library/busybox:latest": docker.io/library/busybox:latest: not found'
    )
    backing_off = wait_for(lambda: waiting("ImagePullBackOff"))
    assert backing_off.status.phase == "Pending"
    message = backing_off.status.container_statuses[0].state.waiting.message
    assert message == f'Back-off pulling image "{MISSING_IMAGE}": ErrImagePull: {pull_error(MISSING_IMAGE)}'
    events = {(e.type, e.reason, e.message) for e in core.list_namespaced_event("default").items}
    assert ("Normal", "Pulling", f'Pulling image "{MISSING_IMAGE}"') in events
    assert ("Warning", "Failed", f'Failed to pull image "{MISSING_IMAGE}": {pull_error(MISSING_IMAGE)}') in events
    assert ("Warning", "Failed", "Error: ErrImagePull") in events
    assert ("Normal", "BackOff", f'Back-off pulling image "{MISSING_IMAGE}"') in events
    assert ("Warning", "Failed", "Error: ImagePullBackOff") in events
    core.delete_namespaced_pod("pull", "default", grace_period_seconds=0)
    with pytest.raises(ApiException):
        core.read_namespaced_pod("pull", "default")


def test_other_images_pull_on_a_cluster_with_missing_images(missing_image_cluster: KubernetesEmulator) -> None:
    core = _client(missing_image_cluster)
    core.create_namespaced_pod("default", pod_manifest("fine", ["true"], container={"image": "trainer"}))
    wait_for(phase_is(core, "fine", "Succeeded"))


# --- the unmodified KubernetesPodOperator ---------------------------------------------------------


@pytest.mark.slow
def test_kpo_node_selector_on_the_os_label(kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api) -> None:
    operator = kpo(kubernetes_emulator, node_selector={"kubernetes.io/os": "linux"}, labels={"case": "os"})
    operator.execute(context())
    pod = _only_pod(core, "case=os")
    assert pod.status.phase == "Succeeded" and pod.spec.node_selector == {"kubernetes.io/os": "linux"}


@pytest.mark.slow
def test_kpo_required_affinity_on_the_hostname(kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api) -> None:
    from kubernetes.client import models as k8s

    term = k8s.V1NodeSelectorTerm(
        match_expressions=[k8s.V1NodeSelectorRequirement(key="kubernetes.io/hostname", operator="In", values=["cpu-1"])]
    )
    affinity = k8s.V1Affinity(
        node_affinity=k8s.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(node_selector_terms=[term])
        )
    )
    kpo(kubernetes_emulator, affinity=affinity, labels={"case": "affinity"}).execute(context())
    pod = _only_pod(core, "case=affinity")
    assert (pod.status.phase, pod.spec.node_name) == ("Succeeded", "cpu-1")


@pytest.mark.slow
def test_kpo_container_resources_with_null_quantities(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    from kubernetes.client import models as k8s

    resources = k8s.V1ResourceRequirements(requests={"cpu": None, "memory": "128Mi"}, limits={"cpu": None})
    kpo(kubernetes_emulator, container_resources=resources, labels={"case": "nulls"}).execute(context())
    pod = _only_pod(core, "case=nulls")
    assert pod.status.phase == "Succeeded"
    stored = pod.spec.containers[0].resources
    assert (stored.requests, stored.limits) == ({"cpu": "0", "memory": "128Mi"}, {"cpu": "0"})


@pytest.mark.slow
def test_kpo_with_a_missing_service_account_is_refused(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    operator = kpo(kubernetes_emulator, service_account_name="nobody", labels={"case": "sa"})
    with pytest.raises(ApiException) as refused:
        operator.execute(context())
    assert refused.value.status == 403
    message = json.loads(refused.value.body)["message"]
    assert message.endswith(
        'is forbidden: error looking up service account default/nobody: serviceaccount "nobody" not found'
    )
    assert core.list_namespaced_pod("default", label_selector="case=sa").items == []


@pytest.mark.slow
def test_kpo_on_kill_leaves_no_pod(kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api) -> None:
    operator = kpo(kubernetes_emulator, cmds=["sleep", "60"], labels={"case": "kill"}, termination_grace_period=0)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            operator.execute(context())
            outcome.append(None)
        except BaseException as error:  # the pod it followed is gone: KPO fails, as on a cluster
            outcome.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    pod = wait_for(lambda: operator.pod is not None and phase_is(core, operator.pod.metadata.name, "Running")())
    operator.on_kill()
    with pytest.raises(ApiException) as gone:  # a force delete has removed the pod when it answers
        core.read_namespaced_pod(pod.metadata.name, "default")
    assert gone.value.status == 404
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert core.list_namespaced_pod("default", label_selector="case=kill").items == []


@pytest.mark.slow
def test_kpo_fails_with_its_pull_error_on_a_missing_image(missing_image_cluster: KubernetesEmulator) -> None:
    """KPO's ``detect_pod_terminate_early_issues`` reads the waiting reason and message, raises
    ``PodLaunchFailedException``, and its cleanup then fails the task with "returned a failure"."""
    from airflow.providers.cncf.kubernetes.utils.pod_manager import PodLaunchFailedException
    from airflow.sdk.exceptions import AirflowException

    operator = kpo(missing_image_cluster, image=MISSING_IMAGE, labels={"case": "image"}, on_finish_action="delete_pod")
    with pytest.raises(AirflowException, match="returned a failure") as failed:
        operator.execute(context())
    launch = failed.value.__context__
    assert isinstance(launch, PodLaunchFailedException)
    reason, message = str(launch).removeprefix("Image cannot be pulled, unable to start: ").split("\n", 1)
    expected = {
        "ErrImagePull": pull_error(MISSING_IMAGE),
        "ImagePullBackOff": f'Back-off pulling image "{MISSING_IMAGE}": ErrImagePull: {pull_error(MISSING_IMAGE)}',
    }
    assert str(launch).startswith("Image cannot be pulled, unable to start: ") and message == expected[reason]
    core = _client(missing_image_cluster)
    wait_for(lambda: not core.list_namespaced_pod("default", label_selector="case=image").items)


@pytest.mark.slow
def test_kpo_pods_cleaned_up_by_deleting_the_collection(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    for task in ("first", "second"):
        kpo(kubernetes_emulator, task_id=task, name=task, labels={"cleanup": "me"}).execute(context())
    core.create_namespaced_pod("default", pod_manifest("bystander", ["true"]))
    assert len(core.list_namespaced_pod("default", label_selector="cleanup=me").items) == 2
    answer = _raw(core.delete_collection_namespaced_pod("default", label_selector="cleanup=me", _preload_content=False))
    assert answer["kind"] == "PodList" and len(answer["items"]) == 2
    wait_for(lambda: not core.list_namespaced_pod("default", label_selector="cleanup=me").items)
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["bystander"]
