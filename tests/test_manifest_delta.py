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
