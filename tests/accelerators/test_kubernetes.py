"""The Kubernetes translation, checked against the real ``kubernetes.client`` models.

Every dict the core produces is deserialised into the client's models and serialised back: a
field name the API does not have would be dropped on the way and fail the comparison.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client import ApiClient
from kubernetes.client import models as k8s

from airflow_gpu import Accelerator, AcceleratorSpecError, LabelScheme
from airflow_gpu.accelerators import kubernetes as kube
from airflow_gpu.utils.kubernetes import pod_operator_arguments, to_model


def _round_trip(data: Any, model: type[Any]) -> Any:
    return ApiClient().sanitize_for_serialization(to_model(data, model))


def _required(affinity: dict[str, Any] | None) -> list[dict[str, Any]]:
    assert affinity is not None
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 1
    return list(terms[0]["matchExpressions"])


REPRESENTATIVE = ["H100:8", "A100-80GB-MIG-3g.40gb", "MI300X:8", "trn2:16", "inf2", "TPU-v5e:4", "L4"]


@pytest.mark.parametrize("text", REPRESENTATIVE)
def test_placement_is_a_valid_pod_spec(text: str) -> None:
    placement = kube.to_kubernetes(text, cpu=8, memory="64Gi", capacity="spot")
    container = {
        "name": "main",
        "image": "busybox",
        "resources": placement.resources,
        "volumeMounts": placement.volume_mounts,
    }
    pod_spec = {
        "containers": [container],
        "affinity": placement.affinity,
        "tolerations": placement.tolerations,
        "volumes": placement.volumes,
    }
    assert _round_trip(pod_spec, k8s.V1PodSpec) == {k: v for k, v in pod_spec.items() if v is not None}


def test_pod_operator_arguments_are_client_models() -> None:
    arguments = pod_operator_arguments(kube.to_kubernetes("H100:8", capacity="spot-if-available"))
    assert isinstance(arguments["container_resources"], k8s.V1ResourceRequirements)
    assert arguments["container_resources"].limits == {"nvidia.com/gpu": "8"}
    assert isinstance(arguments["affinity"], k8s.V1Affinity)
    assert all(isinstance(t, k8s.V1Toleration) for t in arguments["tolerations"])
    assert arguments["volumes"][0].empty_dir.medium == "Memory"
    assert arguments["volume_mounts"][0].mount_path == "/dev/shm"


@pytest.mark.parametrize(
    ("text", "resource"),
    [
        ("H100:8", "nvidia.com/gpu"),
        ("H100-MIG-3g.40gb:2", "nvidia.com/mig-3g.40gb"),
        ("A100-MIG-1g.5gb", "nvidia.com/mig-1g.5gb"),
        ("MI300X:8", "amd.com/gpu"),
        ("trn2:16", "aws.amazon.com/neuron"),
        ("TPU-v5p:4", "google.com/tpu"),
    ],
)
def test_extended_resource_is_limit_and_equal_request(text: str, resource: str) -> None:
    spec = Accelerator.parse(text)
    resources = kube.container_resources(spec, cpu=0.5, memory=4096)
    assert resources["limits"] == {resource: str(spec.count), "memory": "4096Mi"}
    assert resources["requests"] == {resource: str(spec.count), "memory": "4096Mi", "cpu": "500m"}


def test_mig_single_strategy_uses_gpu_resource_and_mig_product_label() -> None:
    spec = Accelerator.parse("A100-40GB-SXM-MIG-1g.5gb")
    assert kube.resource_name(spec, "single") == "nvidia.com/gpu"
    assert _required(kube.node_affinity(spec, mig_strategy="single")) == [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"]}
    ]
    with pytest.raises(AcceleratorSpecError, match="mig_strategy 'both'"):
        kube.resource_name(spec, "both")  # type: ignore[arg-type]


def test_gfd_affinity_lists_every_matching_product() -> None:
    assert _required(kube.node_affinity(Accelerator.parse("H100:8"))) == [
        {
            "key": "nvidia.com/gpu.product",
            "operator": "In",
            "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe", "NVIDIA-H100-NVL"],
        }
    ]
    assert _required(kube.node_affinity(Accelerator.parse("A100-80GB")))[0]["values"] == [
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-A100-80GB-PCIe",
    ]


def test_default_scheme_uses_each_vendors_own_labels() -> None:
    assert _required(kube.node_affinity(Accelerator.parse("MI300X:8"))) == [
        {"key": "amd.com/gpu.device-id", "operator": "In", "values": ["74a1"]}
    ]
    assert _required(kube.node_affinity(Accelerator.parse("inf2:6"))) == [
        {
            "key": "node.kubernetes.io/instance-type",
            "operator": "In",
            "values": ["inf2.24xlarge", "inf2.48xlarge"],
        }
    ]
    assert _required(kube.node_affinity(Accelerator.parse("TPU-v5e:8"))) == [
        {"key": "cloud.google.com/gke-tpu-accelerator", "operator": "In", "values": ["tpu-v5-lite-podslice"]},
        {"key": "cloud.google.com/gke-tpu-topology", "operator": "In", "values": ["2x4"]},
    ]


def test_gke_scheme() -> None:
    assert _required(kube.node_affinity(Accelerator.parse("L4:2"), "gke", "spot")) == [
        {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-l4"]},
        {"key": "cloud.google.com/gke-spot", "operator": "In", "values": ["true"]},
    ]
    assert _required(kube.node_affinity(Accelerator.parse("H200:8"), "gke", "on-demand")) == [
        {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-h200-141gb"]},
        {"key": "cloud.google.com/gke-spot", "operator": "NotIn", "values": ["true"]},
    ]
    with pytest.raises(AcceleratorSpecError, match="has no node label for A10G .GKE does not offer it"):
        kube.node_affinity(Accelerator.parse("A10G"), "gke")


def test_karpenter_scheme_tells_memory_variants_apart() -> None:
    assert _required(kube.node_affinity(Accelerator.parse("A100-80GB:8"), "karpenter", "spot")) == [
        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["a100"]},
        {"key": "karpenter.k8s.aws/instance-gpu-memory", "operator": "In", "values": ["81920"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
    ]
    assert _required(kube.node_affinity(Accelerator.parse("trn1:16"), "karpenter")) == [
        {"key": "karpenter.k8s.aws/instance-accelerator-name", "operator": "In", "values": ["trainium"]}
    ]
    with pytest.raises(AcceleratorSpecError, match="no AWS instance type carries it"):
        kube.node_affinity(Accelerator.parse("MI300X"), "karpenter")


def test_spot_if_available_is_a_preference() -> None:
    affinity = kube.node_affinity(Accelerator.parse("H100"), "nvidia-gfd", "spot-if-available")
    assert affinity is not None
    assert affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {
            "weight": 100,
            "preference": {
                "matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]
            },
        }
    ]
    assert len(_required(affinity)) == 1  # only the GPU type is required


def test_on_demand_accepts_nodes_without_a_capacity_label() -> None:
    requirements = _required(kube.node_affinity(Accelerator.parse("H100"), capacity="on-demand"))
    assert requirements[-1] == {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]}


def test_none_scheme_constrains_nothing() -> None:
    assert kube.node_affinity(Accelerator.parse("H100"), "none", "spot") is None


def test_custom_scheme_from_a_mapping() -> None:
    scheme = {
        "gpu_label": "example.com/gpu",
        "gpu_values": {"A100-80GB": "a100-80", "H100": "h100"},
        "capacity_label": "example.com/pool",
        "spot_value": "preemptible",
        "on_demand_value": "standard",
    }
    assert _required(kube.node_affinity(Accelerator.parse("A100-80GB:2"), scheme, "on-demand")) == [
        {"key": "example.com/gpu", "operator": "In", "values": ["a100-80"]},
        {"key": "example.com/pool", "operator": "In", "values": ["standard"]},
    ]
    assert _required(kube.node_affinity(Accelerator.parse("H100-NVL"), LabelScheme.coerce(scheme))) == [
        {"key": "example.com/gpu", "operator": "In", "values": ["h100"]}
    ]
    with pytest.raises(AcceleratorSpecError, match="gpu_values has no entry for L4"):
        kube.node_affinity(Accelerator.parse("L4"), scheme)
    with pytest.raises(AcceleratorSpecError, match="unknown keys \\['gpu_lable'\\]"):
        LabelScheme.coerce({"gpu_lable": "x"})
    with pytest.raises(AcceleratorSpecError, match="unknown label scheme.*accepted: nvidia-gfd, gke, karpenter"):
        LabelScheme.coerce("aks")


def test_tolerations() -> None:
    assert kube.tolerations(Accelerator.parse("H100")) == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert kube.tolerations(Accelerator.parse("MI300X"))[0]["key"] == "amd.com/gpu"
    assert kube.tolerations(Accelerator.parse("trn2"))[0]["key"] == "aws.amazon.com/neuron"
    assert kube.tolerations(Accelerator.parse("TPU-v5p:4"))[0]["key"] == "google.com/tpu"
    spot = kube.tolerations(Accelerator.parse("L4"), "spot")
    assert {t["key"] for t in spot[1:]} == {
        "cloud.google.com/gke-spot",
        "kubernetes.azure.com/scalesetpriority",
        "karpenter.sh/capacity-type",
        "eks.amazonaws.com/capacityType",
    }
    assert kube.tolerations(Accelerator.parse("L4"), "spot-if-available") == spot
    with pytest.raises(AcceleratorSpecError, match="capacity 'cheap'.*accepted: spot, on-demand, spot-if-available"):
        kube.tolerations(Accelerator.parse("L4"), "cheap")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "size", "memory", "expected"),
    [
        ("H100:8", "auto", None, "65536Mi"),  # 8 GiB per GPU
        ("H100:8", "auto", "32Gi", "16384Mi"),  # never more than half the memory
        ("L4", "auto", None, "8192Mi"),
        ("H100-MIG-1g.10gb:3", "auto", None, "6144Mi"),  # 2 GiB per MIG slice
        ("H100", "16Gi", None, "16384Mi"),
        ("H100", 2048, None, "2048Mi"),
    ],
)
def test_shared_memory_volume(text: str, size: Any, memory: Any, expected: str) -> None:
    shm = kube.shared_memory_volume(Accelerator.parse(text), size, memory)
    assert shm is not None
    volume, mount = shm
    assert volume == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": expected}}
    assert mount == {"name": "dshm", "mountPath": "/dev/shm"}


def test_shared_memory_can_be_turned_off_and_is_checked() -> None:
    spec = Accelerator.parse("H100")
    assert kube.shared_memory_volume(spec, None) is None
    assert kube.shared_memory_volume(spec, "none") is None
    assert kube.to_kubernetes(spec, shared_memory=None).volumes == []
    with pytest.raises(AcceleratorSpecError, match="shared_memory '64Qi'"):
        kube.shared_memory_volume(spec, "64Qi")
    with pytest.raises(AcceleratorSpecError, match="must be smaller than it"):
        kube.shared_memory_volume(spec, "64Gi", "32Gi")


@given(
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1)),
    st.sampled_from(["", ".5", ".123456", ".123456789"]),
)
def test_api_timestamps_deserialise_as_the_client_reads_them(moment: datetime, fraction: str) -> None:
    """The fast timestamp path (``fromisoformat``) gives what the client's dateutil parse gives, for
    every RFC 3339 shape the API server writes (seconds, micro- and nanosecond fractions)."""
    import dateutil.parser
    from kubernetes.client import V1ContainerStateTerminated

    text = moment.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"
    state = to_model({"exitCode": 0, "startedAt": text}, V1ContainerStateTerminated)
    assert state.started_at == dateutil.parser.parse(text)
