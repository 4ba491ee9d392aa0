"""Random pod manifests are scheduled, left Pending with a reason, or refused with 422 — never a crash."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.properties import examples

_names = st.one_of(st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True), st.text(max_size=8))
_quantity = st.one_of(
    st.sampled_from(["1", "2", "8", "16", "500m", "64Gi", "0", "-1", "1.5", "lots", ""]), st.integers(-2, 20)
)
_resources = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "amd.com/gpu"]), _quantity, max_size=3)
_container = st.fixed_dictionaries(
    {"name": _names, "image": st.sampled_from(["busybox", ""])},
    optional={
        "command": st.sampled_from([["true"], ["sleep", "0.1"], ["no-such-binary-xyz"], [], "not-a-list"]),
        "resources": st.fixed_dictionaries({}, optional={"limits": _resources, "requests": _resources}),
    },
)
_toleration = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(["nvidia.com/gpu", ""]),
        "operator": st.sampled_from(["Exists", "Equal", "Bogus"]),
        "effect": st.sampled_from(["NoSchedule", "", "Sometimes"]),
    },
)
_pod = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries({"name": _names}),
        "spec": st.fixed_dictionaries({"containers": st.lists(_container, max_size=2)}),
    },
)
_spec_extras = st.fixed_dictionaries(
    {},
    optional={
        "nodeSelector": st.dictionaries(
            st.sampled_from(["karpenter.sh/capacity-type", "pool"]), st.sampled_from(["spot", "x"])
        ),
        "tolerations": st.lists(_toleration, max_size=2),
        "restartPolicy": st.sampled_from(["Never", "Always", "Sometimes"]),
        "terminationGracePeriodSeconds": st.sampled_from([0, 5, -1]),
    },
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pod=_pod, extras=_spec_extras)
def test_random_manifests_never_crash_the_server(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api, pod: dict[str, Any], extras: dict[str, Any]
) -> None:
    pod["spec"].update(extras)
    try:
        created = core.create_namespaced_pod("default", pod)
    except client.ApiException as error:
        assert error.status in (409, 422), error.body
        assert json.loads(error.body)["kind"] == "Status"
        return
    name = created.metadata.name
    read = core.read_namespaced_pod(name, "default")
    scheduled = read.spec.node_name is not None
    reason = next((c for c in read.status.conditions or [] if c.type == "PodScheduled" and c.status == "False"), None)
    assert scheduled or reason is None or reason.message.startswith("0/4 nodes are available")
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    assert core.list_node().items
