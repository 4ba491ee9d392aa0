"""Scale mode: node groups in cluster files, the built-in GPU fleet, ``--scale`` and its fixture,
and thousands of simulated pods through the unmodified ``kubernetes`` client."""

from __future__ import annotations

import ipaddress
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client, config

from airflow_gpu import cli
from airflow_gpu.testing.kubernetes.cluster import MAX_GROUP_SIZE, ClusterSpec, node_address, node_group
from airflow_gpu.testing.kubernetes.cluster_state import pod_address
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.kubernetes.scale import FLEET, group_sizes, scale_cluster
from tests.properties import examples
from tests.testing.kubernetes.conftest import wait_for

# --- node groups ----------------------------------------------------------------------------------

group_names = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)


@settings(max_examples=examples(100))
@given(
    groups=st.lists(st.tuples(group_names, st.integers(1, 40)), min_size=1, max_size=5, unique_by=lambda g: g[0]),
    accelerator=st.sampled_from([None, "H100-80GB-SXM:8", "L4:4", "A100-80GB:8"]),
    capacity_type=st.sampled_from(["spot", "on-demand"]),
)
def test_a_group_expands_to_count_nodes_alike_but_for_their_names(
    groups: list[tuple[str, int]], accelerator: str | None, capacity_type: str
) -> None:
    entries = [
        {"name": f"{name}-pool", "count": count, "accelerator": accelerator, "capacity_type": capacity_type,
         "labels": {"team": name}}
        for name, count in groups
    ]  # fmt: skip
    cluster = ClusterSpec.from_dict({"nodes": entries})
    assert len(cluster.nodes) == sum(count for _, count in groups)
    by_group = Counter(node.name.rsplit("-", 1)[0] for node in cluster.nodes)
    assert by_group == {f"{name}-pool": count for name, count in groups}
    for (name, count), entry in zip(groups, entries, strict=True):
        members = [n for n in cluster.nodes if n.name.rsplit("-", 1)[0] == entry["name"]]
        assert [n.name for n in members] == [f"{name}-pool-{i}" for i in range(1, count + 1)]
        assert {(n.accelerator, n.capacity_type, n.labels["team"]) for n in members} == {
            (accelerator, capacity_type, name)
        }


@settings(max_examples=examples(50))
@given(count=st.one_of(st.integers(max_value=0), st.integers(min_value=MAX_GROUP_SIZE + 1), st.booleans(),
                       st.floats(allow_nan=False), st.text(max_size=4), st.none()))  # fmt: skip
def test_a_bad_count_is_refused_naming_the_field_the_value_and_the_range(count: Any) -> None:
    with pytest.raises(ValueError) as refused:
        node_group({"name": "gpu", "count": count})
    message = str(refused.value)
    assert "'gpu'" in message and "count must be a whole number from 1 to 100,000" in message
    assert f"got {count!r}" in message


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"name": "n", "cnt": 3}, "node 'n': unknown keys ['cnt']; known: count, name, accelerator, capacity_type"),
        ({"name": "n", "count": 2, "capacity_type": "x"}, "capacity_type must be spot or on-demand; got 'x'"),
        ({"name": "n", "accelerator": "H10:8"}, "node 'n': accelerator 'H10:8': "),
        ({"count": 3}, "a node needs a name (a non-empty string); got None"),
        ("gpu-1", "a node must be a mapping of name, accelerator"),
    ],
)  # fmt: skip
def test_a_bad_node_entry_says_what_is_wrong_and_what_is_accepted(entry: Any, expected: str) -> None:
    with pytest.raises(ValueError) as refused:
        ClusterSpec.from_dict({"nodes": [entry]})
    assert expected in str(refused.value)


def test_node_names_stay_unique_across_groups() -> None:
    with pytest.raises(ValueError, match="'gpu-2' comes twice"):
        ClusterSpec.from_dict({"nodes": [{"name": "gpu", "count": 2}, {"name": "gpu-2"}]})


@settings(max_examples=examples(50))
@given(index=st.integers(0, 3 * MAX_GROUP_SIZE))
def test_every_node_and_pod_gets_its_own_valid_address(index: int) -> None:
    for address, following in (
        (node_address(index), node_address(index + 1)),
        (pod_address(index), pod_address(index + 1)),
    ):
        assert ipaddress.IPv4Address(address).is_private
        assert address != following
    assert node_address(0) == "10.0.0.10" and pod_address(1) == "10.244.0.3"


# --- the built-in fleet ---------------------------------------------------------------------------


@settings(max_examples=examples(100))
@given(nodes=st.integers(1, MAX_GROUP_SIZE))
def test_the_fleet_has_exactly_the_nodes_asked_for_in_its_shares(nodes: int) -> None:
    sizes = dict((group.name, size) for group, size in group_sizes(nodes))
    assert sum(sizes.values()) == nodes
    total = sum(group.share for group in FLEET)
    for group in FLEET:
        assert abs(sizes.get(group.name, 0) - nodes * group.share / total) < 1


def test_scale_nodes_carry_their_gpus_labels_taints_and_capacity() -> None:
    cluster = scale_cluster(200)
    assert len(cluster.nodes) == 200 and cluster.name == "scale-200"
    objects = {spec.name: spec.to_node(i) for i, spec in enumerate(cluster.nodes)}
    h100, a100, l4, cpu = objects["h100-spot-1"], objects["a100-on-demand-1"], objects["l4-7"], objects["cpu-60"]
    assert h100["metadata"]["labels"].items() >= {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
        "karpenter.sh/capacity-type": "spot", "eks.amazonaws.com/capacityType": "SPOT",
        "cloud.google.com/gke-spot": "true", "node.kubernetes.io/instance-type": "p5.48xlarge",
        "karpenter.k8s.aws/instance-gpu-name": "h100", "kubernetes.io/hostname": "h100-spot-1",
    }.items()  # fmt: skip
    allocatable = {"nvidia.com/gpu": "8", "cpu": "192", "memory": "2048Gi", "pods": "110"}
    assert h100["status"]["allocatable"].items() >= allocatable.items()
    assert h100["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert a100["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert a100["metadata"]["labels"]["karpenter.sh/capacity-type"] == "on-demand"
    assert "cloud.google.com/gke-spot" not in a100["metadata"]["labels"]
    assert (l4["status"]["allocatable"]["nvidia.com/gpu"], l4["metadata"]["labels"]["nvidia.com/gpu.product"]) == (
        "4",
        "NVIDIA-L4",
    )
    assert "nvidia.com/gpu" not in cpu["status"]["allocatable"] and not cpu["spec"]
    addresses = {o["status"]["addresses"][0]["address"] for o in objects.values()}
    assert len(addresses) == 200


# --- the command and the fixture --------------------------------------------------------------------


def test_the_scale_flag_parses_and_refuses_what_is_not_a_node_count(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.build_parser().parse_args(["emulate", "kubernetes", "--scale", "2000"])
    assert (args.scale, args.cluster) == (2000, None)
    for bad, said in (
        (["--scale", "0"], "a whole number of nodes from 1 to 100,000; got '0'"),
        (["--scale", "lots"], "got 'lots'"),
        (["--scale", "10", "--cluster", "demo"], "not allowed with argument --scale"),
    ):
        assert cli.main(["emulate", "kubernetes", *bad]) == 2
        assert said in capsys.readouterr().err


def test_the_command_serves_the_scale_cluster_and_announces_its_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served: list[list[str]] = []

    def serve_once(emulator: KubernetesEmulator, kubeconfig: Path, announce: Callable[[Any], None]) -> None:
        with emulator:  # the real server, stopped after announcing instead of at SIGTERM
            emulator.write_kubeconfig(kubeconfig)
            announce(emulator)
            core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
            served.append([n.metadata.name for n in core.list_node().items])

    monkeypatch.setattr(KubernetesEmulator, "serve_forever", serve_once)
    cli.run(["emulate", "kubernetes", "--scale", "40", "--kubeconfig", str(tmp_path / "kubeconfig")])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Kubernetes API emulator (scale-40 cluster, 40 nodes) at http://127.0.0.1:")
    assert out[1] == (
        "nodes: 10 h100-spot (H100-80GB-SXM:8, spot), 4 h100-on-demand (H100-80GB-SXM:8, on-demand), "
        "4 a100-spot (A100-80GB:8, spot), 2 a100-on-demand (A100-80GB:8, on-demand), 8 l4 (L4:4, on-demand), "
        "12 cpu (CPU, on-demand); simulated.local/... images run no process"
    )
    assert len(served[0]) == 40 and "h100-spot-10" in served[0]


def simulated_pod(name: str, gpu: bool, seconds: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "base",
        "image": "simulated.local/shard",
        "env": [{"name": "SIMULATED_SECONDS", "value": seconds}],
    }
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if gpu:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {"metadata": {"name": name, "labels": {"app": "shard"}}, "spec": spec}


@pytest.mark.slow  # 2,000 pods through HTTP, the client in this process: about 5 s on two cores
def test_two_thousand_simulated_pods_all_schedule_and_run(
    kubernetes_scale_emulator: Callable[..., KubernetesEmulator],
) -> None:
    emulator = kubernetes_scale_emulator(nodes=300)
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))
    names = [f"shard-{i}" for i in range(2000)]
    for i, name in enumerate(names):  # half on GPUs (1,000 of the fleet's 1,440), a quarter done at once
        body = simulated_pod(name, gpu=i % 2 == 0, seconds="0" if i % 4 == 1 else "3600")
        core.create_namespaced_pod("default", body, _preload_content=False).drain_conn()

    def listed() -> list[dict[str, Any]] | None:
        items = json.loads(core.list_namespaced_pod("default", label_selector="app=shard", _preload_content=False).data)
        pods: list[dict[str, Any]] = items["items"]
        settled = all(p["status"]["phase"] in ("Running", "Succeeded") for p in pods)
        return pods if len(pods) == len(names) and settled else None

    pods = wait_for(listed, timeout=120)
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(names)
    phases = Counter(p["status"]["phase"] for p in pods)
    assert phases == {"Running": 1500, "Succeeded": 500}
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    gpu_nodes = Counter(nodes[name] for i, name in enumerate(names) if i % 2 == 0)
    assert all(not node.startswith("cpu-") for node in gpu_nodes)
    assert max(gpu_nodes.values()) <= 8  # no node holds more GPU pods than it has GPUs
    scheduled = [next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled") for p in pods]
    assert {c["status"] for c in scheduled} == {"True"}
