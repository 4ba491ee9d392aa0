"""``GPUKubernetesHook.gpu_capacity`` against the emulator, through Airflow's ``kubernetes_default`` connection."""

from __future__ import annotations

from kubernetes import client, config

from airflow_gpu.hooks.kubernetes import GPUCapacity, GPUKubernetesHook, node_accelerator, node_capacity_type
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.testing.kubernetes.conftest import phase_is, wait_for


def test_gpu_capacity_by_type_and_capacity_type(kubernetes_default_connection: KubernetesEmulator) -> None:
    hook = GPUKubernetesHook()
    assert hook.gpu_capacity() == [
        GPUCapacity("H100-80GB", "spot", "nvidia.com/gpu", nodes=2, allocatable=16, requested=0),
        GPUCapacity("L4-24GB", "on-demand", "nvidia.com/gpu", nodes=1, allocatable=4, requested=0),
    ]
    api = client.CoreV1Api(config.new_client_from_config(str(kubernetes_default_connection.kubeconfig_path)))
    pod = {
        "metadata": {"name": "uses-three"},
        "spec": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "command": ["sleep", "30"],
                    "resources": {"limits": {"nvidia.com/gpu": "3"}},
                }
            ],
        },
    }
    api.create_namespaced_pod("default", pod)
    wait_for(phase_is(api, "uses-three", "Running"))
    l4 = next(c for c in hook.gpu_capacity() if c.accelerator == "L4-24GB")
    assert (l4.requested, l4.free) == (3, 1)
    assert str(l4) == "L4-24GB on on-demand: 4 on 1 node(s), 1 free"


def test_node_labels_of_every_scheme() -> None:
    assert node_accelerator({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}) == "A100-40GB"
    assert node_accelerator({"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"}) == "H200-141GB"
    assert node_accelerator({"karpenter.k8s.aws/instance-gpu-name": "l40s"}) == "L40S"
    assert node_accelerator({"karpenter.k8s.aws/instance-accelerator-name": "trainium2"}) == "Trainium2"
    assert node_accelerator({"amd.com/gpu.device-id": "74a1"}) == "MI300X"
    assert node_accelerator({"kubernetes.io/os": "linux"}) is None
    assert node_capacity_type({"eks.amazonaws.com/capacityType": "SPOT"}) == "spot"
    assert node_capacity_type({"cloud.google.com/gke-spot": "true"}) == "spot"
    assert node_capacity_type({}) == "on-demand"
