"""The user's pod settings added to the GPU placement's: property checks against Kubernetes' own rules
(a request never above its limit; tolerations, volumes and mounts keyed as the API keys them)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.accelerators import pod_merge
from airflow_gpu.accelerators.kubernetes import to_kubernetes
from airflow_gpu.accelerators.quantities import memory_mib

names = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"])
amounts = st.integers(min_value=1, max_value=512).map(lambda n: f"{n}Gi")
side = st.dictionaries(names, amounts, max_size=3)
GPU = to_kubernetes("H100:8", cpu=16, memory="64Gi", capacity="spot")


@given(st.fixed_dictionaries({}, optional={"requests": side, "limits": side}))
def test_a_request_never_ends_above_its_limit_unless_the_user_wrote_it_so(user: dict[str, Any]) -> None:
    merged = pod_merge.merge_resources(GPU.resources, user)
    for name, request in (merged.get("requests") or {}).items():
        limit = (merged.get("limits") or {}).get(name)
        mine = name in (user.get("requests") or {}) or name in (user.get("limits") or {})
        if limit is not None and not mine and name != "cpu":
            assert memory_mib(request) <= memory_mib(limit)
        if mine:  # the user's name is the user's, request and limit together
            assert request == (user.get("requests") or {}).get(name)
            assert limit == (user.get("limits") or {}).get(name)


def test_a_user_memory_request_above_the_spec_limit_takes_the_limit_with_it() -> None:
    merged = pod_merge.merge_resources(GPU.resources, {"requests": {"memory": "128Gi"}})
    assert merged["requests"]["memory"] == "128Gi" and "memory" not in merged["limits"]
    assert merged["limits"]["nvidia.com/gpu"] == "8"


keys = st.sampled_from(["nvidia.com/gpu", "dedicated", "karpenter.sh/capacity-type", None])
effects = st.sampled_from(["NoSchedule", "NoExecute", None])
tolerations = st.lists(st.builds(lambda k, e: {"key": k, "operator": "Exists", "effect": e}, keys, effects), max_size=4)


@given(tolerations)
def test_every_gpu_toleration_stays_unless_the_user_gave_the_same_key_and_effect(user: list[dict[str, Any]]) -> None:
    merged = pod_merge.merge_tolerations(GPU.tolerations, user)
    for mine in user:
        assert mine in merged
    for gpu in GPU.tolerations:
        same = any((u["key"], u["effect"]) == (gpu.get("key"), gpu.get("effect")) for u in user)
        assert (gpu in merged) != same or gpu in user


def test_a_users_volume_keeps_dev_shm_and_a_users_dev_shm_replaces_ours() -> None:
    data = [{"name": "data", "emptyDir": {}}]
    assert {v["name"] for v in pod_merge.merge_volumes(GPU.volumes, data)} == {"dshm", "data"}
    mount = [{"name": "mine", "mountPath": "/dev/shm"}]
    assert pod_merge.merge_mounts(GPU.volume_mounts, mount) == mount
