"""What a deferred ``GPUBatchOperator`` hands its trigger (``batch_deferral.resubmission_plan``).

The plan is stored in Airflow's ``trigger`` table with every deferral (``kwargs``: a TEXT column of
64 KiB on MySQL): the first placement's SubmitJob arguments travel whole, the others as deltas,
and the trigger must rebuild each exactly as the worker would have built it. No AWS call is made:
the job definitions the operator registers are given their ARNs at the hook.
"""

from __future__ import annotations

import json
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_gpu.accelerators.batch import instance_offers
from airflow_gpu.accelerators.batch_queues import QueueOffer, offered_placement
from airflow_gpu.hooks.batch import GPUBatchHook
from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.operators.batch_deferral import resubmission_plan
from airflow_gpu.spot.policy import Placement
from airflow_gpu.triggers.batch_resubmission import BatchResubmission, placement_key
from tests.operators.test_batch_operator_runs import Ti

QUEUES = {"spot": "gpu-spot", "on-demand": "gpu-on-demand"}
CANDIDATES = ["H100:8", "A100:8", "L40S:4", "A10G:4", "L4:1", "T4:1"]
#: The MySQL ``TEXT`` column of ``trigger.kwargs``.
TRIGGER_KWARGS_LIMIT = 64 * 1024


@pytest.fixture(autouse=True)
def registered_definitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """RegisterJobDefinition answers with an ARN per name (the hook's own lookup is tested against the emulator)."""

    def register(hook: GPUBatchHook, name: str, definition: dict[str, Any]) -> str:
        return f"arn:aws:batch:us-east-1:123456789012:job-definition/{name}:1"

    monkeypatch.setattr(GPUBatchHook, "register_job_definition_once", register)


def operator(**kwargs: Any) -> GPUBatchOperator:
    kwargs.setdefault("job_queues", QUEUES)
    return GPUBatchOperator(task_id="train", command=["python", "train.py", "--epochs", "10"], **kwargs)


def every_placements_arguments(op: GPUBatchOperator, context: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What the worker itself would submit at each placement the run can reach, without ``jobName``."""
    run, found = op.spot_run, {}
    saved = run.to_json()
    for placement in run.reachable_placements():
        run.move_to(placement)
        found[placement_key(placement)] = op.submission_arguments(context, placement)  # type: ignore[arg-type]
        found[placement_key(placement)].pop("jobName")
    run.restore(saved)
    return found


def large_environment(variables: int = 36, size: int = 150) -> dict[str, str]:
    """A realistic training job's variables: paths, URIs, a JSON config, tokens, near ECS's 8,192 characters."""
    return {f"TRAIN_SETTING_{i:02d}": (string.ascii_letters * 4)[i : i + size] for i in range(variables)}


def test_a_plan_of_four_candidates_on_two_capacities_stays_far_below_the_trigger_table_limit() -> None:
    op = operator(accelerator=CANDIDATES[:4], environment=large_environment(), gpu_profile=True)
    context = {"ti": Ti()}
    plan = resubmission_plan(op, context)  # type: ignore[arg-type]
    expected = every_placements_arguments(op, context)
    assert len(expected) == 8
    size = len(json.dumps(plan))
    whole = len(json.dumps(expected))
    assert whole > TRIGGER_KWARGS_LIMIT * 0.75  # what every placement in full would have taken
    assert size < TRIGGER_KWARGS_LIMIT / 4, f"the plan takes {size} bytes"
    carried = BatchResubmission.from_argument(json.loads(json.dumps(plan)))
    assert {key: carried.arguments(key) for key in expected} == expected


environments = st.dictionaries(
    st.from_regex(r"[A-Z][A-Z0-9_]{0,24}", fullmatch=True),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=120),
    max_size=30,
)


FAMILIES = ["p5", "p4d", "g6e", "g5", "g6", "g4dn"]  # H100, A100, L40S, A10G, L4, T4
#: What each queue's compute environments launch, as the worker read them at execute; empty: not read.
offers = st.one_of(
    st.just({}),
    st.fixed_dictionaries({
        queue: st.lists(st.sampled_from(FAMILIES), min_size=1, unique=True)
        for queue in ("gpu-spot", "gpu-on-demand", "gpu")
    }),
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.sampled_from(CANDIDATES), min_size=1, max_size=4, unique=True),
    environments,
    st.booleans(),
    st.booleans(),
    st.booleans(),
    offers,
)
def test_every_placement_comes_back_from_the_plan_exactly_where_the_worker_would_submit_it(
    candidates: list[str],
    environment: dict[str, str],
    profiled: bool,
    fallback: bool,
    both_queues: bool,
    families: dict[str, list[str]],
) -> None:
    """For each placement the policy may choose: the placement the worker's queue check would submit
    instead (``offered_placement``), and that placement's arguments, to the letter."""
    queues: dict[str, Any] = {"job_queues": QUEUES} if both_queues else {"job_queues": None, "job_queue": "gpu"}
    op = operator(
        accelerator=candidates, environment=environment, gpu_profile=profiled,
        spot={"fallback_to_on_demand": fallback}, **queues,
    )  # fmt: skip
    op._offers = {name: QueueOffer(name, "mixed", instance_offers(types)) for name, types in families.items()}
    context = {"ti": Ti()}
    plan = resubmission_plan(op, context)  # type: ignore[arg-type]
    carried = BatchResubmission.from_argument(json.loads(json.dumps(plan)))  # as the trigger table gives it back
    run = op.spot_run
    for placement in run.reachable_placements():
        worker = offered_placement(placement, op.candidates, op.queues, str(op.job_queue), op._offers)
        assert carried.moves.get(placement_key(placement), placement) == worker
        run.move_to(worker)
        expected = op.submission_arguments(context, worker)  # type: ignore[arg-type]
        expected.pop("jobName")
        assert carried.arguments(placement_key(worker)) == expected


def test_a_plan_written_before_the_deltas_is_still_read() -> None:
    """A trigger already in the table when the provider is upgraded has every placement in full."""
    op = operator(accelerator=CANDIDATES[:2], environment=large_environment(5))
    context = {"ti": Ti()}
    expected = every_placements_arguments(op, context)
    plan = resubmission_plan(op, context)  # type: ignore[arg-type]
    old = {k: v for k, v in plan.items() if k not in ("base", "base_key", "deltas", "moves")}
    carried = BatchResubmission.from_argument({**old, "submissions": expected})
    assert {key: carried.arguments(key) for key in expected} == expected


def test_a_placement_its_queue_does_not_launch_moves_where_the_worker_would_submit_it() -> None:
    """The spot queue launches g5 (A10G) only, the on-demand queue g5 and g6 (L4): the next candidate
    on spot, L4, goes to on-demand, as ``submit_job`` would send it, and its arguments are carried."""
    op = operator(accelerator=["A10G:1", "L4:1"], spot={"fallback_to_on_demand": False})
    op._offers = {
        "gpu-spot": QueueOffer("gpu-spot", "spot", instance_offers(["g5"])),
        "gpu-on-demand": QueueOffer("gpu-on-demand", "on-demand", instance_offers(["g5", "g6"])),
    }
    plan = resubmission_plan(op, {"ti": Ti()})  # type: ignore[arg-type]
    assert plan["moves"] == {"1/spot": [1, "on-demand"]}
    carried = BatchResubmission.from_argument(plan)
    carried.run.move_to(Placement(1, "spot"))  # what the policy chooses after a capacity timeout on A10G
    assert carried.move_to_offered() == Placement(1, "spot")
    assert carried.run.placement == Placement(1, "on-demand")
    args = carried.submission(carried.next_name())
    assert args["jobQueue"] == "gpu-on-demand" and args["jobDefinition"].endswith("--L4:1")
