"""The spot run: one task try's way through its submissions, written once for every GPU operator.

A GPU task try may submit several workloads (pods, Batch jobs): one is preempted, the next goes
to the next candidate accelerator or to on-demand capacity. What has to survive between them
(placement, submissions, interruptions, the platform attempts already counted) is one
``SpotRun``. It serialises to JSON so that it rides through a deferral, a pod annotation or the
task state store; it asks ``next_step`` what to do after each workload; it renders the workload's
environment and the failure message. The operators only translate: they build the submission
from ``placement``, observe the pod or job, hand the classification here and act on the decision.

Interruption records have one shape for every backend (XCom ``gpu_interruptions``), see
``Interruption``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Literal

from airflow_gpu.spot.classifier import Classification
from airflow_gpu.spot.policy import Capacity, Decision, Placement, SpotPolicy, next_step

Backend = Literal["kubernetes", "batch"]
#: What a backend calls one submission, for messages.
WORKLOAD_NOUN: dict[str, str] = {"kubernetes": "pod", "batch": "job"}
#: Environment variables every workload gets (documented in docs/spot.rst).
ENV_ACCELERATOR = "AIRFLOW_GPU_ACCELERATOR"
ENV_CAPACITY = "AIRFLOW_GPU_CAPACITY"
ENV_ATTEMPT = "AIRFLOW_GPU_ATTEMPT"
ENV_INTERRUPTIONS = "AIRFLOW_GPU_INTERRUPTIONS"
#: Version of the serialised state; a state of another version is ignored, never misread.
STATE_VERSION = 1
#: ``Interruption.action`` of an attempt the platform retried by itself (Batch ``retryStrategy``).
PLATFORM_RETRIED = "retried-by-platform"


@dataclass(frozen=True)
class Interruption:
    """One workload attempt that the platform, not the workload, ended.

    The same keys from either operator, so a dashboard or a reduce step reads both:

    * ``time``: when the attempt ended as the platform reports it (UTC, ISO 8601): ``finish``'s
      ``ended_at``, else when the operator or trigger recorded it. A trigger that restarts replays
      the run and records the same attempts again minutes later: the platform's time stays;
    * ``backend``: ``"kubernetes"`` or ``"batch"``; ``workload``: the pod name or Batch job id;
    * ``attempt``: the platform's attempt of that workload (Batch ``attempts[]``, 1-based; always
      1 on Kubernetes); ``submission``: which submission of this task try it was (1-based);
    * ``accelerator``, ``capacity`` (``spot``, ``on-demand`` or ``any``) and ``location`` (the
      Batch queue, or the Kubernetes node when known);
    * ``outcome``, ``reason``, ``message`` and ``exit_code`` from the classifier;
    * ``action`` (``resubmit``, ``fail``, or ``retried-by-platform``) and ``next``, the decision's
      message.
    """

    time: str
    backend: str
    workload: str
    attempt: int
    submission: int
    accelerator: str
    capacity: str
    location: str | None
    outcome: str
    reason: str
    message: str
    exit_code: int | None
    action: str
    next: str


def _legacy_record(record: Mapping[str, Any], backend: str) -> dict[str, Any]:
    """An interruption as the release before the shared core wrote it (``job``/``pod``, ``queue``)."""
    fields = {name: None for name in Interruption.__dataclass_fields__}
    known = {k: v for k, v in record.items() if k in fields}
    workload = record.get("job") or record.get("pod") or "?"
    location = record.get("queue")
    defaults = {"backend": backend, "attempt": 1, "submission": 0, "action": "", "next": "", "message": ""}
    return {**fields, **defaults, **known, "workload": workload, "location": location}


@dataclass
class SpotRun:
    """The state of one task try across submissions, and the rules that move it on."""

    policy: SpotPolicy
    candidates: tuple[str, ...]
    requested_capacity: Capacity | None
    backend: Backend
    placement: Placement
    #: Submissions made before the current one (0 while the first runs).
    submissions: int = 0
    #: Interruptions counted against ``placement.capacity`` (reset when the capacity changes).
    interruptions_on_capacity: int = 0
    interruptions: list[dict[str, Any]] = field(default_factory=list)
    #: ``workload#attempt`` keys already recorded, so an attempt is never counted twice.
    seen: set[str] = field(default_factory=set)
    #: The current workload: Batch job id or pod name.
    workload: str | None = None
    #: Image -> the profiler's wrapper form its pods start with, where it is not the first
    #: (``profiling.wrapper_forms``: an image without ``/bin/sh`` starts it with python3, or not at all).
    profiler_forms: dict[str, str] = field(default_factory=dict)
    #: The interruptions the last ``finish`` recorded (for the task log; not part of the state).
    recorded: list[dict[str, Any]] = field(default_factory=list, compare=False)

    @classmethod
    def start(
        cls,
        policy: SpotPolicy,
        candidates: Sequence[object],
        backend: Backend,
        requested_capacity: Capacity | None,
    ) -> SpotRun:
        return cls(
            policy,
            tuple(str(c) for c in candidates),
            requested_capacity,
            backend,
            Placement(0, requested_capacity),
        )

    @property
    def accelerator(self) -> str:
        return self.candidates[self.placement.candidate]

    @property
    def capacity(self) -> str:
        return self.placement.capacity or "any"

    # --- what survives a process ----------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "candidate": self.placement.candidate,
            "capacity": self.placement.capacity,
            "submissions": self.submissions,
            "interruptions_on_capacity": self.interruptions_on_capacity,
            "interruptions": list(self.interruptions),
            "seen": sorted(self.seen),
            "workload": self.workload,
        } | ({"profiler_forms": dict(self.profiler_forms)} if self.profiler_forms else {})

    def restore(self, state: Mapping[str, Any]) -> str | None:
        """Take a saved state back; returns why it was ignored (the DAG changed), else None.

        A state without a version was written by airflow-provider-gpu before the shared core (a pod
        or job still running across the upgrade): its keys are read the way they were written.
        """
        if "version" not in state:
            state = {
                **state,
                "version": STATE_VERSION,
                "workload": state.get("job_id"),
                "seen": state.get("seen_attempts"),
                "interruptions": [_legacy_record(r, self.backend) for r in state.get("interruptions") or []],
            }
        if state.get("version") != STATE_VERSION:
            return f"state version {state.get('version')!r} is not {STATE_VERSION}"
        candidate = int(state.get("candidate", 0))
        if not 0 <= candidate < len(self.candidates):
            return f"candidate {candidate} of {len(self.candidates)} no longer exists"
        self.placement = Placement(candidate, state.get("capacity"))
        self.submissions = int(state.get("submissions", 0))
        self.interruptions_on_capacity = int(state.get("interruptions_on_capacity", 0))
        self.interruptions = [dict(i) for i in state.get("interruptions") or []]
        self.seen = set(state.get("seen") or [])
        self.workload = state.get("workload")
        self.profiler_forms = {str(k): str(v) for k, v in (state.get("profiler_forms") or {}).items()}
        return None

    # --- what the workload and the readers see --------------------------------------------

    def environment(self) -> dict[str, str]:
        """What the workload learns about itself: checkpoint more often after an interruption."""
        return {
            ENV_ACCELERATOR: self.accelerator,
            ENV_CAPACITY: self.capacity,
            ENV_ATTEMPT: str(self.submissions + 1),
            ENV_INTERRUPTIONS: str(len(self.interruptions)),
        }

    def summary(self, location: str | None = None) -> dict[str, Any]:
        """XCom ``gpu_accelerator``: where the (last) workload ran; ``location`` is the Batch queue or the
        Kubernetes node (None when not known)."""
        return {"accelerator": self.accelerator, "capacity": self.capacity, "location": location}

    def failure_message(self, decision: Decision, detail: str = "") -> str:
        noun = WORKLOAD_NOUN[self.backend]
        history = "".join(
            f"\n  - {i['time']} {noun} {i['workload']} (attempt {i['attempt']}) on "
            f"{i['accelerator']}/{i['capacity']}: {i['reason']}"
            for i in self.interruptions
        )
        return decision.message + (f"\nInterruptions:{history}" if history else "") + detail

    # --- the rules ------------------------------------------------------------------------

    def reachable_placements(self) -> list[Placement]:
        """Every placement the policy can move this run to, the current one first: each candidate on
        the requested capacity, and on on-demand where the policy falls back. A trigger that carries
        the run on is handed the workload of each, built once on the worker."""
        capacities: list[Capacity | None] = [self.requested_capacity]
        if self.policy.fallback_to_on_demand and self.requested_capacity is not None:
            capacities.append("on-demand")
        found = [self.placement]
        for candidate in range(len(self.candidates)):
            for capacity in dict.fromkeys(capacities):
                if Placement(candidate, capacity) not in found:
                    found.append(Placement(candidate, capacity))
        return found

    def move_to(self, placement: Placement) -> None:
        """Before a submission: the operator found the placement's candidate is not offered."""
        if placement.capacity != self.placement.capacity:
            self.interruptions_on_capacity = 0
        self.placement = placement

    def submitted(self, workload: str) -> None:
        self.workload = workload

    def resubmit_unchanged(self) -> None:
        """The workload is submitted again as it was, on the same placement, by the operator's own
        choice (the profiler's wrapper could not start in the image): no interruption, no decision."""
        self.submissions += 1
        self.workload = None

    def finish(
        self,
        final: Classification,
        attempts: Sequence[Classification] = (),
        *,
        workload: str | None = None,
        location: str | None = None,
        identity: str | None = None,
        ended_at: Sequence[datetime | None] = (),
    ) -> Decision:
        """Record how the workload ended and decide: succeed, resubmit (state moves on) or fail.

        ``attempts`` are the platform's attempts of the workload in order (Batch retries spot
        reclaims itself); without them the workload had one attempt, ``final``. Every interrupted
        attempt is recorded once, however often the same workload is looked at; ``identity`` tells
        workloads apart where names repeat (a pod's uid: pods of a fixed name share the name).
        ``ended_at`` says when each of those attempts ended, in the same order, as the platform
        reports it (an aware datetime); an attempt without one is stamped with the present time.
        """
        workload = workload or self.workload or "?"
        attempts = list(attempts) or [final]
        new: list[Interruption] = []
        for number, attempt in enumerate(attempts, start=1):
            key = f"{identity or workload}#{number}"
            if not attempt.interrupted or key in self.seen:
                continue
            self.seen.add(key)
            last = number == len(attempts) and final.interrupted
            ended = ended_at[number - 1] if number <= len(ended_at) else None
            new.append(self._record(attempt, workload, number, location, last, ended))
        earlier = sum(1 for a in attempts if a.interrupted) - (1 if final.interrupted else 0)
        before = self.interruptions_on_capacity + earlier
        decision = next_step(self.policy, final, self.placement, before, len(self.candidates), self.requested_capacity)
        if new and final.interrupted:
            new[-1] = replace(new[-1], action=decision.action, next=decision.message)
        self.recorded = [asdict(i) for i in new]
        self.interruptions = [*self.interruptions, *self.recorded]
        if decision.action == "resubmit":
            if decision.placement.capacity != self.placement.capacity:
                self.interruptions_on_capacity = 0
            else:  # reclaims the platform retried itself count too
                self.interruptions_on_capacity = before + (1 if decision.counts_as_interruption else 0)
            self.placement = decision.placement
            self.submissions += 1
            self.workload = None
        return decision

    def _record(
        self,
        attempt: Classification,
        workload: str,
        number: int,
        location: str | None,
        last: bool,
        ended: datetime | None,
    ) -> Interruption:
        return Interruption(
            time=(ended or datetime.now(timezone.utc)).astimezone(timezone.utc).isoformat(),
            backend=self.backend,
            workload=workload,
            attempt=number,
            submission=self.submissions + 1,
            accelerator=self.accelerator,
            capacity=self.capacity,
            location=location,
            outcome=attempt.outcome.value,
            reason=attempt.reason,
            message=attempt.message,
            exit_code=attempt.exit_code,
            action="" if last else PLATFORM_RETRIED,
            next="" if last else "the platform ran the workload again (retryStrategy)",
        )
