"""The scheduler's cache decides exactly as ``scheduler.schedule``, the definition, on any cluster.

``schedule`` reads every node and every pod for each decision; ``SchedulerCache`` keeps nodes by
shape and use from the store's events. Hypothesis builds clusters (nodes alike and not, cordoned,
tainted, full), pods bound, ended and gone, and pending pods with tolerations, selectors and
affinities (some on the node's own name), changes the cluster step by step, and compares the two
answers (the node, or the ``FailedScheduling`` message) after every step.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu.testing.kubernetes.scheduler import schedule
from airflow_gpu.testing.kubernetes.scheduler_cache import SchedulerCache, reads_node_name
from airflow_gpu.testing.kubernetes.store import Store
from tests.properties import examples

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
ML_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
SOFT_TAINT = {"key": "soft", "value": "x", "effect": "PreferNoSchedule"}

node_templates = st.fixed_dictionaries(
    {
        "labels": st.fixed_dictionaries({"pool": st.sampled_from(["a", "b"]), "gpu": st.sampled_from(["yes", "no"])}),
        "taints": st.lists(
            st.sampled_from([GPU_TAINT, ML_TAINT, SOFT_TAINT]), max_size=2, unique_by=lambda t: t["key"]
        ),
        "cpu": st.sampled_from(["2", "4", "8"]),
        "memory": st.sampled_from(["4Gi", "8Gi"]),
        "pods": st.sampled_from(["2", "4", "110"]),
        "gpus": st.sampled_from([0, 2, 4]),
        "unschedulable": st.booleans(),
    }
)
requests = st.fixed_dictionaries(
    {
        "cpu": st.sampled_from([None, "500m", "1", "2"]),
        "memory": st.sampled_from([None, "1Gi", "3Gi"]),
        "nvidia.com/gpu": st.sampled_from([None, "0", "1", "2"]),
    }
)


def node(name: str, template: dict[str, Any]) -> dict[str, Any]:
    allocatable = {"cpu": template["cpu"], "memory": template["memory"], "pods": template["pods"]}
    if template["gpus"]:
        allocatable["nvidia.com/gpu"] = str(template["gpus"])
    spec: dict[str, Any] = {"taints": [dict(t) for t in template["taints"]]}
    if template["unschedulable"]:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": {**template["labels"], "kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def pod(name: str, amounts: dict[str, str | None], **spec: Any) -> dict[str, Any]:
    limits = {resource: amount for resource, amount in amounts.items() if amount is not None}
    container = {"name": "c", "image": "simulated.local/x", "resources": {"limits": limits}}
    return {"metadata": {"name": name}, "spec": {"containers": [container], **spec}, "status": {"phase": "Pending"}}


@st.composite
def pending_pods(draw: st.DrawFn, names: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    tolerations = draw(st.lists(st.sampled_from([GPU_TAINT, ML_TAINT, {"operator": "Exists"}]), max_size=2))
    if tolerations:
        spec["tolerations"] = [
            t if "key" not in t else {"key": t["key"], "operator": "Equal", "value": t["value"]} for t in tolerations
        ]
    selector = draw(st.sampled_from([None, {"pool": "a"}, {"kubernetes.io/hostname": names[0]}]))
    if selector:
        spec["nodeSelector"] = selector
    term = draw(
        st.sampled_from(
            [
                None,
                {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["yes"]}]},
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": names[:1]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": names[-2:]}]},
            ]
        )
    )
    if term:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    return pod("pending", draw(requests), **spec)


def agree(store: Store, cache: SchedulerCache, candidate: dict[str, Any]) -> tuple[str | None, str]:
    expected = schedule(candidate, store.list("nodes"), store.list("pods"))
    assert cache.schedule(candidate) == expected
    return expected


@settings(max_examples=examples(150), deadline=None)
@given(templates=st.lists(node_templates, min_size=1, max_size=4), data=st.data())
def test_the_cache_decides_as_the_definition_while_the_cluster_changes(
    templates: list[dict[str, Any]], data: st.DataObject
) -> None:
    store = Store()
    cache = SchedulerCache(store)
    count = data.draw(st.integers(1, 10))
    names = [f"n{i}" for i in range(count)]
    for name in names:  # several nodes per template: shapes shared by many nodes
        store.create("nodes", "", node(name, data.draw(st.sampled_from(templates))))
    for i in range(data.draw(st.integers(0, 12))):
        bound = pod(f"bound-{i}", data.draw(requests))
        bound["spec"]["nodeName"] = data.draw(st.sampled_from([*names, "gone"]))
        bound["status"]["phase"] = data.draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]))
        store.create("pods", "default", bound)
    for step in range(data.draw(st.integers(1, 6))):
        candidate = data.draw(pending_pods(names))
        chosen, _ = agree(store, cache, candidate)
        action = data.draw(st.sampled_from(["bind", "end", "delete", "cordon", "relabel", "remove", "add"]))
        live_pods = [p for p in store.list("pods") if p["spec"].get("nodeName")]
        live_nodes = store.list("nodes")
        if action == "bind" and chosen is not None:
            candidate["metadata"]["name"] = f"placed-{step}"
            candidate["spec"]["nodeName"] = chosen
            candidate["status"]["phase"] = "Running"
            store.create("pods", "default", candidate)
        elif action in ("end", "delete") and live_pods:
            target = data.draw(st.sampled_from(live_pods))
            if action == "delete":
                store.remove("pods", "default", target["metadata"]["name"])
            else:
                target["status"]["phase"] = "Succeeded"
                store.update("pods", target)
        elif action in ("cordon", "relabel", "remove") and live_nodes:
            target = data.draw(st.sampled_from(live_nodes))
            if action == "remove":
                store.remove("nodes", "", target["metadata"]["name"])
            else:
                if action == "cordon":
                    target["spec"]["unschedulable"] = not target["spec"].get("unschedulable")
                else:
                    target["metadata"]["labels"]["pool"] = "b" if target["metadata"]["labels"]["pool"] == "a" else "a"
                store.update("nodes", target, spec_changed=True)
        elif action == "add":
            name = f"added-{step}"
            store.create("nodes", "", node(name, data.draw(st.sampled_from(templates))))
    agree(store, cache, data.draw(pending_pods(names)))


def test_pending_pods_are_those_without_a_node_not_being_deleted() -> None:
    store = Store()
    cache = SchedulerCache(store)
    store.create("pods", "default", pod("waiting", {}))
    bound = pod("bound", {})
    bound["spec"]["nodeName"] = "n0"
    store.create("pods", "default", bound)
    going = pod("going", {})
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    store.create("pods", "default", going)
    assert cache.pending == {("default", "waiting")}
    store.remove("pods", "default", "waiting")
    assert cache.pending == set()


def test_a_pod_reads_the_node_name_through_its_selector_or_affinity() -> None:
    assert not reads_node_name(pod("p", {}, nodeSelector={"pool": "a"}))
    assert reads_node_name(pod("p", {}, nodeSelector={"kubernetes.io/hostname": "n0"}))
    fields = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [fields]}}}
    assert reads_node_name(pod("p", {}, affinity=affinity))
