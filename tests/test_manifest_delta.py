"""``manifest_delta``: a pod and a delta per other placement give every placement's pod back."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.utils.manifest_delta import apply, delta

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text("ab", max_size=3))
names = st.sampled_from(["base", "sidecar", "init", "x"])


def documents() -> st.SearchStrategy[Any]:
    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        named = st.lists(
            st.fixed_dictionaries({"name": names}, optional={"value": children, "image": scalars}),
            max_size=3,
        )
        return st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(st.sampled_from(["a", "b", "env", "spec", "$x"]), children, max_size=4),
            named,
        )

    return st.recursive(scalars, extend, max_leaves=12)


@given(documents(), documents())
def test_apply_of_delta_gives_the_other_document_back(base: Any, other: Any) -> None:
    before = json.dumps(base, sort_keys=True)
    assert apply(base, delta(base, other)) == other
    assert json.dumps(base, sort_keys=True) == before  # neither call changes its input


def test_a_placement_that_changes_resources_does_not_repeat_the_command() -> None:
    command = ["/bin/sh", "-c", "x" * 20_000, "airflow-gpu-profile", "python", "train.py"]
    spot: dict[str, Any] = {
        "metadata": {"name": "t", "labels": {"airflow-gpu/capacity": "spot"}},
        "spec": {
            "containers": [
                {"name": "base", "image": "cuda:12.4", "command": command,
                 "resources": {"limits": {"nvidia.com/gpu": "8"}}, "env": [{"name": "AIRFLOW_GPU_CAPACITY",
                                                                            "value": "spot"}]},
                {"name": "sidecar", "image": "alpine"},
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
    }  # fmt: skip
    on_demand = json.loads(json.dumps(spot))
    on_demand["metadata"]["labels"]["airflow-gpu/capacity"] = "on-demand"
    on_demand["spec"]["containers"][0]["env"][0]["value"] = "on-demand"
    on_demand["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
    on_demand["spec"]["tolerations"] = []
    change = delta(spot, on_demand)
    assert apply(spot, change) == on_demand
    assert len(json.dumps(change)) < 500 and "xxxx" not in json.dumps(change)


def test_a_batch_placement_repeats_neither_the_environment_nor_a_multi_node_jobs_overrides() -> None:
    """A multi-node job's overrides sit in a list of node ranges without names: compared by position.
    An environment whose names stay in their order carries the changed variables only."""
    environment = [{"name": f"SETTING_{i}", "value": "v" * 100} for i in range(60)]
    spot = {
        "jobQueue": "gpu-spot",
        "nodeOverrides": {"nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": {
            "command": ["python", "-c", "x" * 2_000],
            "environment": [*environment, {"name": "AIRFLOW_GPU_CAPACITY", "value": "spot"}],
            "resourceRequirements": [{"type": "GPU", "value": "8"}, {"type": "VCPU", "value": "96"}],
        }}]},
    }  # fmt: skip
    on_demand = json.loads(json.dumps(spot))
    on_demand["jobQueue"] = "gpu-on-demand"
    overrides = on_demand["nodeOverrides"]["nodePropertyOverrides"][0]["containerOverrides"]
    overrides["environment"][-1]["value"] = "on-demand"
    overrides["resourceRequirements"][0]["value"] = "4"
    change = delta(spot, on_demand)
    assert apply(spot, change) == on_demand
    assert len(json.dumps(change)) < 300 and "SETTING_" not in json.dumps(change)


def test_a_delta_an_earlier_release_wrote_still_applies() -> None:
    """A pod trigger stored before the layout form (every name in order, an item for each) is read
    by the new triggerer after an upgrade."""
    base = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    written_before = {"$by_name": {"order": ["B", "C"], "items": [{"value": "3"}, {"$new": {"name": "C"}}]}}
    assert apply(base, written_before) == [{"name": "B", "value": "3"}, {"name": "C"}]
    assert apply(base, delta(base, [{"name": "B", "value": "3"}, {"name": "C"}])) == [
        {"name": "B", "value": "3"}, {"name": "C"},
    ]  # fmt: skip
