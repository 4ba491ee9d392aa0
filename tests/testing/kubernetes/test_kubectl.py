"""Real ``kubectl`` against the emulator, as a user who ran ``export KUBECONFIG=...`` would.

The expected columns and cells are the kube-apiserver's printers
(``pkg/printers/internalversion/printers.go`` in kubernetes/kubernetes, 1.30+): ``printNode``
(STATUS ``Ready`` plus ``SchedulingDisabled`` when ``spec.unschedulable``, ROLES ``<none>``
without ``node-role.kubernetes.io/*`` labels, -o wide INTERNAL-IP from the ``InternalIP``
address), ``printPod`` (READY ``ready/total``, STATUS ``Completed`` from a container terminated
with reason Completed, -o wide IP and NODE), ``printJob`` (STATUS ``Complete``, COMPLETIONS
``succeeded/completions``) and ``printNamespace`` (STATUS from ``status.phase``). kubectl prints
only NAME and AGE when the server answers no Table, so these fail on a server without one.

kubectl 1.32 sends ``create namespace`` and ``create quota`` bodies as
``application/vnd.kubernetes.protobuf`` (checked with ``-v=8``); Debian's 1.20 sends JSON. The
protobuf bodies below are what kubectl 1.32 sent, so the decoding is tested whichever kubectl
``make test`` installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from kubernetes import client

from airflow_gpu.testing.kubernetes import protobuf
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.programs import program
from tests.testing.kubernetes.conftest import wait_for

#: kubectl 1.32's body for ``kubectl create namespace training``.
NAMESPACE_PB = (
    "6b3873000a0f0a02763112094e616d65737061636512200a180a08747261696e696e6712001a0022002a003200380042001200"
    "1a020a001a002200"
)
#: kubectl 1.32's body for ``kubectl create quota gpus -n training --hard=requests.nvidia.com/gpu=8,pods=4``.
QUOTA_PB = (
    "6b3873000a130a027631120d5265736f7572636551756f7461124f0a1c0a046770757312001a08747261696e696e6722002a0032"
    "0038004200122d0a0b0a04706f647312030a01340a1e0a1772657175657374732e6e76696469612e636f6d2f67707512030a01"
    "381a001a002200"
)


def kubectl(emulator: KubernetesEmulator, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(emulator.kubeconfig_path)}
    return subprocess.run([program("kubectl"), *args], env=env, capture_output=True, text=True, timeout=60, check=check)


def table(output: str) -> list[dict[str, str]]:
    """kubectl's column output as rows keyed by header (columns are two or more spaces apart)."""
    lines = [line for line in output.splitlines() if line.strip()]
    header = lines[0]
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    names = header.split()
    rows = []
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def test_get_nodes_prints_the_servers_columns_and_a_cordoned_node(kubernetes_emulator: KubernetesEmulator) -> None:
    kubernetes_emulator.cordon("gpu-spot-1")
    result = kubectl(kubernetes_emulator, "get", "nodes")
    assert result.stdout.splitlines()[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    rows = {row["NAME"]: row for row in table(result.stdout)}
    assert rows["gpu-spot-1"]["STATUS"] == "Ready,SchedulingDisabled"
    assert rows["gpu-spot-2"]["STATUS"] == "Ready"
    assert rows["cpu-1"]["ROLES"] == "<none>"
    assert rows["cpu-1"]["VERSION"].startswith("v1.")

    wide = kubectl(kubernetes_emulator, "get", "nodes", "-o", "wide").stdout
    assert wide.splitlines()[0].split()[:7] == [
        "NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP",
    ]  # fmt: skip
    node = json.loads(kubectl(kubernetes_emulator, "get", "node", "cpu-1", "-o", "json").stdout)
    internal = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    assert {row["NAME"]: row for row in table(wide)}["cpu-1"]["INTERNAL-IP"] == internal


def test_get_pods_and_jobs_show_status_as_kubectl_computes_it(kubernetes_emulator: KubernetesEmulator) -> None:
    kubectl(kubernetes_emulator, "run", "sleeper", "--image=busybox", "--restart=Never", "--", "sleep", "600")
    kubectl(kubernetes_emulator, "create", "job", "done", "--image=busybox", "--", "true")
    core = client.CoreV1Api(client.ApiClient(_configuration(kubernetes_emulator)))

    def settled() -> Any:
        pods = core.list_namespaced_pod("default").items
        phases = {p.metadata.name.split("-")[0]: p.status.phase for p in pods}
        return pods if phases.get("sleeper") == "Running" and phases.get("done") == "Succeeded" else None

    pods = wait_for(settled)
    result = kubectl(kubernetes_emulator, "get", "pods", "-o", "wide")
    assert result.stdout.splitlines()[0].split() == [
        "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES",
    ]  # fmt: skip
    rows = {row["NAME"]: row for row in table(result.stdout.replace("NOMINATED NODE", "NOMINATED_NODE"))}
    sleeper = next(p for p in pods if p.metadata.name == "sleeper")
    assert rows["sleeper"]["READY"] == "1/1" and rows["sleeper"]["STATUS"] == "Running"
    assert rows["sleeper"]["NODE"] == sleeper.spec.node_name and rows["sleeper"]["IP"] == sleeper.status.pod_ip
    done = next(name for name in rows if name.startswith("done-"))
    assert rows[done]["READY"] == "0/1" and rows[done]["STATUS"] == "Completed"

    labelled = kubectl(kubernetes_emulator, "get", "pods", "-l", "run=sleeper", "--show-labels").stdout
    assert [(row["NAME"], row["LABELS"]) for row in table(labelled)] == [("sleeper", "run=sleeper")]

    jobs = kubectl(kubernetes_emulator, "get", "jobs").stdout
    assert jobs.splitlines()[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    job = table(jobs)[0]
    assert (job["NAME"], job["STATUS"], job["COMPLETIONS"]) == ("done", "Complete", "1/1")


def test_create_namespace_and_quota(kubernetes_emulator: KubernetesEmulator) -> None:
    kubectl(kubernetes_emulator, "create", "namespace", "training")
    kubectl(kubernetes_emulator, "create", "quota", "gpus", "-n", "training", "--hard=requests.nvidia.com/gpu=8,pods=4")
    namespaces = {row["NAME"]: row for row in table(kubectl(kubernetes_emulator, "get", "namespaces").stdout)}
    assert namespaces["training"]["STATUS"] == "Active"
    core = client.CoreV1Api(client.ApiClient(_configuration(kubernetes_emulator)))
    quota = core.read_namespaced_resource_quota("gpus", "training")
    assert quota.spec.hard == {"requests.nvidia.com/gpu": "8", "pods": "4"}
    quotas = kubectl(kubernetes_emulator, "get", "quota", "-n", "training").stdout
    assert quotas.splitlines()[0].split() == ["NAME", "AGE", "REQUEST", "LIMIT"]


def test_protobuf_bodies_kubectl_sends_are_read() -> None:
    namespace = protobuf.decode(bytes.fromhex(NAMESPACE_PB))
    assert namespace == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "training"}}
    quota = protobuf.decode(bytes.fromhex(QUOTA_PB))
    assert quota == {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": "training"},
        "spec": {"hard": {"pods": "4", "requests.nvidia.com/gpu": "8"}},
    }


def test_a_protobuf_create_reaches_the_store(kubernetes_emulator: KubernetesEmulator) -> None:
    import urllib.request

    request = urllib.request.Request(
        f"{kubernetes_emulator.url}/api/v1/namespaces?fieldManager=kubectl-create",
        data=bytes.fromhex(NAMESPACE_PB),
        headers={"Content-Type": protobuf.CONTENT_TYPE, "Accept": f"{protobuf.CONTENT_TYPE},application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        assert json.loads(response.read())["metadata"]["name"] == "training"


def _configuration(emulator: KubernetesEmulator) -> client.Configuration:
    configuration = client.Configuration()
    configuration.host = emulator.url
    return configuration


#: ``kubectl api-resources`` on a kube-apiserver (1.30+) for the kinds the emulator serves: the short
#: names and categories are each registry's ``ShortNames()``/``Categories()``
#: (``pkg/registry/core/*/storage/storage.go``, ``pkg/registry/batch/job/storage``): ConfigMap
#: ``cm``, Endpoints ``ep``, Event ``ev``, LimitRange ``limits``, Namespace ``ns``, Node ``no``, Pod
#: ``po`` (all), ResourceQuota ``quota``, ServiceAccount ``sa``, Service ``svc`` (all); Secret and
#: Job have none, Job is in ``all``.
REAL_SHORT_NAMES = {
    "configmaps": "cm", "endpoints": "ep", "events": "ev", "limitranges": "limits", "namespaces": "ns",
    "nodes": "no", "pods": "po", "resourcequotas": "quota", "secrets": "", "serviceaccounts": "sa",
    "services": "svc", "jobs": "",
}  # fmt: skip


def test_short_names_and_categories_are_the_real_servers(kubernetes_emulator: KubernetesEmulator) -> None:
    listed = kubectl(kubernetes_emulator, "api-resources").stdout
    rows = {row["NAME"]: row["SHORTNAMES"] for row in table(listed)}
    assert {name: rows.get(name) for name in REAL_SHORT_NAMES} == REAL_SHORT_NAMES

    kubectl(kubernetes_emulator, "create", "configmap", "settings", "--from-literal=a=1")
    names = kubectl(kubernetes_emulator, "get", "cm", "-o", "name").stdout.split()
    assert "configmap/settings" in names
    wide = kubectl(kubernetes_emulator, "api-resources", "--categories=all", "-o", "name").stdout.split()
    assert sorted(wide) == ["jobs.batch", "pods", "services"]


def test_a_new_cluster_shows_the_kubernetes_service_as_a_real_one(kubernetes_emulator: KubernetesEmulator) -> None:
    """``kubectl get svc,ep`` on a fresh kubeadm cluster: ``kubernetes  ClusterIP  10.96.0.1  <none>
    443/TCP`` and its Endpoints at the API server's address and port."""
    services = table(kubectl(kubernetes_emulator, "get", "svc").stdout)
    assert [(r["NAME"], r["TYPE"], r["CLUSTER-IP"], r["PORT(S)"]) for r in services] == [
        ("kubernetes", "ClusterIP", "10.96.0.1", "443/TCP")
    ]
    endpoints = table(kubectl(kubernetes_emulator, "get", "ep", "kubernetes").stdout)
    assert endpoints[0]["ENDPOINTS"] == f"{kubernetes_emulator.host}:{kubernetes_emulator.port}"
    maps = table(kubectl(kubernetes_emulator, "get", "cm", "-n", "kube-system").stdout)
    assert [(r["NAME"], r["DATA"]) for r in maps] == [("kube-root-ca.crt", "1")]
