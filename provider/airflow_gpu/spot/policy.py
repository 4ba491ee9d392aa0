"""``SpotPolicy`` and the decision after each run: finish, resubmit, move on, or fail.

SkyPilot and Skyward users expect a preempted spot job to come back by itself, a bug to fail
once, and a cluster without spot capacity to fall back to on-demand. The operators keep the state
(how many interruptions, which candidate, which capacity) and ask ``next_step`` what to do; the
rules live here, where a table of cases tests them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from airflow_gpu.spot.classifier import Classification, Outcome

#: ``Classification.reason`` of a workload the API server refused at admission (``spot.admission``): a
#: single pod's create, or a training Job's ranks (the Job controller's ``FailedCreate`` events).
REFUSALS = frozenset({"AdmissionRefused", "FailedCreate"})

Capacity = Literal["spot", "on-demand", "spot-if-available"]


class SpotPolicy(BaseModel):
    """How a GPU task rides out spot capacity.

    * ``max_interruptions``: resubmissions after preemption or eviction on one capacity type;
      past it, the task falls back to on-demand (when allowed) with a fresh budget, else fails.
    * ``fallback_to_on_demand``: move to on-demand capacity when spot is exhausted or unavailable.
    * ``capacity_timeout``: seconds a pod may wait unschedulable before the next candidate
      accelerator (then on-demand) is tried; also the bound on how long a pod may stay Pending.
    * ``grace_period_seconds``: SIGTERM-to-SIGKILL time the workload gets to checkpoint
      (GKE spot gives about 25 s, AWS a two-minute notice).
    * ``retry_on_app_failure``: let Airflow's retries run after an application failure; by
      default a bug fails the task at once instead of burning GPU hours on retries.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_interruptions: int = Field(default=3, ge=0, le=100)
    fallback_to_on_demand: bool = True
    capacity_timeout: float = Field(default=600.0, gt=0)
    grace_period_seconds: int = Field(default=90, ge=0, le=3600)
    retry_on_app_failure: bool = False


Action = Literal["succeed", "resubmit", "fail"]


@dataclass(frozen=True)
class Placement:
    """Where the next submission goes: which candidate accelerator, on which capacity."""

    candidate: int
    capacity: Capacity | None


@dataclass(frozen=True)
class Decision:
    action: Action
    placement: Placement
    message: str
    #: For ``fail``: whether Airflow's own retries may run (no for a bug, by default).
    retry_allowed: bool = True
    #: For ``resubmit``: whether this run counts as an interruption of the current capacity.
    counts_as_interruption: bool = False


def next_step(
    policy: SpotPolicy,
    result: Classification,
    placement: Placement,
    interruptions: int,
    candidates: int,
    requested_capacity: Capacity | None,
) -> Decision:
    """What to do after a run ended with ``result``.

    ``interruptions`` counts the interruptions already seen on ``placement.capacity`` before this
    one; ``candidates`` is how many accelerators the task may use, in preference order.
    """
    if result.outcome is Outcome.SUCCEEDED:
        return Decision("succeed", placement, "succeeded")
    on_demand = Placement(0, "on-demand")
    can_fall_back = (
        policy.fallback_to_on_demand and placement.capacity != "on-demand" and requested_capacity is not None
    )
    if result.interrupted:
        if interruptions < policy.max_interruptions:
            return Decision(
                "resubmit",
                placement,
                f"{result.outcome.value} ({result.reason}); resubmitting, interruption "
                f"{interruptions + 1} of {policy.max_interruptions}",
                counts_as_interruption=True,
            )
        if can_fall_back:
            return Decision(
                "resubmit",
                Placement(placement.candidate, "on-demand"),
                f"{result.outcome.value} ({result.reason}): {interruptions + 1} interruptions, more than "
                f"max_interruptions={policy.max_interruptions}; falling back to on-demand capacity",
                counts_as_interruption=True,
            )
        return Decision(
            "fail",
            placement,
            f"{result.outcome.value} ({result.reason}): {interruptions + 1} interruptions, more than "
            f"max_interruptions={policy.max_interruptions}"
            + ("" if policy.fallback_to_on_demand else " and fallback_to_on_demand is off"),
        )
    if result.outcome is Outcome.UNSCHEDULABLE:
        if placement.candidate + 1 < candidates:
            return Decision(
                "resubmit",
                Placement(placement.candidate + 1, placement.capacity),
                f"unschedulable for longer than capacity_timeout={policy.capacity_timeout:g}s "
                f"({result.message}); trying the next accelerator candidate",
            )
        if can_fall_back:
            return Decision(
                "resubmit",
                on_demand,
                f"unschedulable for longer than capacity_timeout={policy.capacity_timeout:g}s "
                f"({result.message}); falling back to on-demand capacity",
            )
        return Decision(
            "fail",
            placement,
            f"unschedulable for longer than capacity_timeout={policy.capacity_timeout:g}s: {result.message}",
        )
    if result.outcome is Outcome.APPLICATION:
        return Decision(
            "fail",
            placement,
            f"the application failed ({result.message or result.reason}); not a preemption, so it is not resubmitted"
            + ("" if policy.retry_on_app_failure else " and Airflow retries are skipped (retry_on_app_failure=False)"),
            retry_allowed=policy.retry_on_app_failure,
        )
    if result.outcome is Outcome.INFRASTRUCTURE and result.reason in REFUSALS:
        return Decision(
            "fail",
            placement,
            f"{result.message}. Not resubmitted and no spot budget spent: a refusal at admission is not a "
            "preemption, and no other accelerator or capacity changes what the namespace admits; Airflow's "
            "retries apply (a quota held by other pods can free up)",
        )
    if result.outcome is Outcome.INFRASTRUCTURE:
        return Decision(
            "fail",
            placement,
            f"the workload could not start as configured ({result.message or result.reason}); not resubmitted: "
            "starting it again would fail the same way (check the image, the command, and the secrets, "
            "volumes and log configuration it names)",
        )
    if result.outcome is Outcome.DELETED:
        return Decision(
            "fail",
            placement,
            f"the workload was deleted while it ran, not by a node reclaim ({result.message or result.reason}); "
            "not resubmitted, Airflow's retries apply",
        )
    if result.outcome is Outcome.UNKNOWN:
        return Decision(
            "fail",
            placement,
            f"the run ended in a way airflow-gpu does not recognise ({result.reason}: {result.message}); "
            "not resubmitted, Airflow's retries apply",
        )
    return Decision("fail", placement, f"the run ended without a final state ({result.reason})")
