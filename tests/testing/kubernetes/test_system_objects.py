"""What every real cluster holds before anyone writes to it, and keeps there.

From the API server's ``kubernetesservice`` controller and endpoint reconciler (Service and
Endpoints ``kubernetes`` in ``default``: labels ``component=apiserver``/``provider=kubernetes``,
the service range's first address, port ``https`` 443 to the API server's port, recreated when
deleted) and the controller manager's root CA publisher (ConfigMap ``kube-root-ca.crt`` with
``ca.crt`` in every namespace, 1.21+, recreated when deleted and written back when changed).
"""

from __future__ import annotations

import ipaddress

from kubernetes import client

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.testing.kubernetes.conftest import wait_for


def test_the_kubernetes_service_points_at_the_api_server(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    service = core.read_namespaced_service("kubernetes", "default")
    assert service.metadata.labels == {"component": "apiserver", "provider": "kubernetes"}
    assert service.spec.type == "ClusterIP" and service.spec.cluster_ip == "10.96.0.1"
    assert service.spec.selector is None
    (port,) = service.spec.ports
    assert (port.name, port.port, port.protocol, port.target_port) == ("https", 443, "TCP", kubernetes_emulator.port)
    endpoints = core.read_namespaced_endpoints("kubernetes", "default")
    assert endpoints.metadata.labels == {"endpointslice.kubernetes.io/skip-mirror": "true"}
    (subset,) = endpoints.subsets
    assert [a.ip for a in subset.addresses] == [kubernetes_emulator.host]
    assert [(p.name, p.port, p.protocol) for p in subset.ports] == [("https", kubernetes_emulator.port, "TCP")]

    core.delete_namespaced_service("kubernetes", "default")
    core.delete_namespaced_endpoints("kubernetes", "default")
    again = wait_for(lambda: core.list_namespaced_service("default", field_selector="metadata.name=kubernetes").items)
    assert again[0].spec.cluster_ip == "10.96.0.1"
    wait_for(lambda: core.list_namespaced_endpoints("default").items)


def test_no_other_service_gets_the_kubernetes_services_address(core: client.CoreV1Api) -> None:
    for index in range(20):
        created = core.create_namespaced_service(
            "default", {"metadata": {"name": f"s{index}"}, "spec": {"ports": [{"port": 80}]}}
        )
        assert ipaddress.ip_address(created.spec.cluster_ip) != ipaddress.ip_address("10.96.0.1")


def test_every_namespace_has_the_root_ca_config_map(core: client.CoreV1Api) -> None:
    for namespace in ("default", "kube-system", "kube-public"):
        found = core.read_namespaced_config_map("kube-root-ca.crt", namespace)
        assert set(found.data) == {"ca.crt"} and found.data["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")
        assert "kube-apiserver" in found.metadata.annotations["kubernetes.io/description"]
    core.create_namespace({"metadata": {"name": "team-a"}})
    published = wait_for(lambda: core.list_namespaced_config_map("team-a").items)
    assert [m.metadata.name for m in published] == ["kube-root-ca.crt"]

    core.patch_namespaced_config_map("kube-root-ca.crt", "team-a", {"data": {"ca.crt": "mine", "extra": "x"}})
    restored = wait_for(
        lambda: (m := core.read_namespaced_config_map("kube-root-ca.crt", "team-a")).data.get("ca.crt") != "mine" and m
    )
    assert set(restored.data) == {"ca.crt"}
    core.delete_namespaced_config_map("kube-root-ca.crt", "team-a")
    wait_for(lambda: core.list_namespaced_config_map("team-a").items)
