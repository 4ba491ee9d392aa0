"""Strategic merge patch by each field's merge key, as ``apimachinery/pkg/util/strategicpatch`` does
with the ``patchStrategy``/``patchMergeKey`` tags of Kubernetes' Go types (``k8s.io/api/core/v1``:
``Container.Ports`` ``merge``/``containerPort``, ``Container.VolumeMounts`` ``merge``/``mountPath``,
``Container.Env`` ``merge``/``name``, ``Container.EnvFrom`` untagged, ``PodSpec.Tolerations``
untagged, ``PodSpec.HostAliases`` ``merge``/``ip``, ``PodSpec.TopologySpreadConstraints``
``merge``/``topologyKey``, ``PodSpec.ImagePullSecrets`` ``merge``/``name``, ``ServiceSpec.Ports``
``merge``/``port``, ``ObjectMeta.Finalizers`` ``merge`` (scalars), ``ObjectMeta.OwnerReferences``
``merge``/``uid``, ``PodStatus.Conditions`` ``merge``/``type``). An untagged list is replaced whole.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from airflow_gpu.testing.kubernetes.patch import STRATEGIC, apply

CONTAINER = {
    "name": "base",
    "image": "busybox",
    "ports": [{"name": "http", "containerPort": 80}, {"containerPort": 9090}],
    "volumeMounts": [{"name": "data", "mountPath": "/a"}, {"name": "data", "mountPath": "/b", "readOnly": True}],
    "env": [{"name": "A", "value": "1"}],
    "envFrom": [{"configMapRef": {"name": "one"}}],
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "finalizers": ["a/one"], "ownerReferences": [{"uid": "u1", "name": "j", "kind": "Job"}]},
    "spec": {
        "containers": [CONTAINER],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["one"]}],
        "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}],
        "imagePullSecrets": [{"name": "regcred"}],
    },
    "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]},
}


def container(**changes: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "base", **changes}]}}


CASES = [
    pytest.param(
        container(ports=[{"containerPort": 80, "protocol": "TCP"}]),
        lambda pod: pod["spec"]["containers"][0]["ports"],
        [{"name": "http", "containerPort": 80, "protocol": "TCP"}, {"containerPort": 9090}],
        id="ports-by-containerPort",
    ),
    pytest.param(
        container(volumeMounts=[{"name": "data", "mountPath": "/b", "readOnly": False}]),
        lambda pod: pod["spec"]["containers"][0]["volumeMounts"],
        [{"name": "data", "mountPath": "/a"}, {"name": "data", "mountPath": "/b", "readOnly": False}],
        id="volumeMounts-by-mountPath",
    ),
    pytest.param(
        container(env=[{"name": "B", "value": "2"}]),
        lambda pod: pod["spec"]["containers"][0]["env"],
        [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        id="env-by-name",
    ),
    pytest.param(
        container(envFrom=[{"secretRef": {"name": "two"}}]),
        lambda pod: pod["spec"]["containers"][0]["envFrom"],
        [{"secretRef": {"name": "two"}}],
        id="envFrom-replaced",
    ),
    pytest.param(
        {"spec": {"tolerations": [{"key": "spot", "operator": "Exists"}]}},
        lambda pod: pod["spec"]["tolerations"],
        [{"key": "spot", "operator": "Exists"}],
        id="tolerations-replaced",
    ),
    pytest.param(
        {"spec": {"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["two"]}, {"ip": "10.0.0.2", "hostnames": ["x"]}]}},
        lambda pod: pod["spec"]["hostAliases"],
        [{"ip": "10.0.0.1", "hostnames": ["two"]}, {"ip": "10.0.0.2", "hostnames": ["x"]}],
        id="hostAliases-by-ip",
    ),
    pytest.param(
        {"spec": {"topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 2}]}},
        lambda pod: pod["spec"]["topologySpreadConstraints"],
        [{"topologyKey": "zone", "maxSkew": 2, "whenUnsatisfiable": "DoNotSchedule"}],
        id="topologySpreadConstraints-by-topologyKey",
    ),
    pytest.param(
        {"spec": {"imagePullSecrets": [{"name": "other"}]}},
        lambda pod: pod["spec"]["imagePullSecrets"],
        [{"name": "regcred"}, {"name": "other"}],
        id="imagePullSecrets-by-name",
    ),
    pytest.param(
        {"metadata": {"finalizers": ["b/two", "a/one"]}},
        lambda pod: pod["metadata"]["finalizers"],
        ["a/one", "b/two"],
        id="finalizers-union",
    ),
    pytest.param(
        {"metadata": {"ownerReferences": [{"uid": "u1", "controller": True}]}},
        lambda pod: pod["metadata"]["ownerReferences"],
        [{"uid": "u1", "name": "j", "kind": "Job", "controller": True}],
        id="ownerReferences-by-uid",
    ),
    pytest.param(
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        lambda pod: pod["status"]["conditions"],
        [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}],
        id="conditions-by-type",
    ),
    pytest.param(
        container(ports=[{"$patch": "delete", "containerPort": 9090}]),
        lambda pod: pod["spec"]["containers"][0]["ports"],
        [{"name": "http", "containerPort": 80}],
        id="delete-directive-by-merge-key",
    ),
    pytest.param(
        {
            "spec": {
                "containers": [
                    {"name": "base", "$setElementOrder/volumeMounts": [{"mountPath": "/b"}, {"mountPath": "/a"}]}
                ]
            }
        },
        lambda pod: [m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]],
        ["/b", "/a"],
        id="setElementOrder-by-merge-key",
    ),
]


@pytest.mark.parametrize(("patch", "read", "expected"), CASES)
def test_each_list_merges_by_its_fields_merge_key(patch: dict[str, Any], read: Any, expected: Any) -> None:
    assert read(apply(POD, patch, STRATEGIC, "V1Pod")) == expected


def test_a_service_port_is_patched_by_its_port_through_the_api(core: client.CoreV1Api) -> None:
    """``kubectl patch svc web -p '{"spec":{"ports":[{"port":80,"targetPort":8080}]}}'`` changes port 80's
    target and keeps the https port: ``ServiceSpec.Ports`` merges by ``port``."""
    core.create_namespaced_service(
        "default",
        {
            "metadata": {"name": "web"},
            "spec": {"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}], "selector": {"a": "b"}},
        },
    )
    patched = core.patch_namespaced_service("web", "default", {"spec": {"ports": [{"port": 80, "targetPort": 8080}]}})
    assert [(p.name, p.port, p.target_port) for p in patched.spec.ports] == [("http", 80, 8080), ("https", 443, 443)]
