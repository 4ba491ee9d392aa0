"""Is this pod, training Job or Batch job an orphan? One pure rule, tested without a cloud or an Airflow.

An orphan is work whose task try can no longer follow it: the task instance finished, a later try
runs without it, or Airflow no longer knows the task instance (its run was deleted). Everything
else is kept, and so is anything the rule cannot be sure of, because deleting a live training
throws hours of GPU time away while keeping an orphan costs one more reaper round:

* work younger than the grace period: a just-created pod whose task Airflow has not recorded yet;
* work of a task instance that finished less than the grace period ago: the operator's own cleanup
  (a pod's termination grace, a Job's foreground deletion) may still be under way;
* work of an earlier try that the next try may take over: KPO's reattach and the provider's
  take-over (``operators.retry_handover``, ``training_job_reattach``, the Batch job's identity tags)
  adopt a live, unchecked workload of an earlier try of the same task instance, keeping its
  labels. So an earlier try's work is an orphan only when a later try has work of its own, or it
  was marked checked (no try reattaches to it), or the task instance has finished;
* a state this rule does not know (a newer Airflow's).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

#: Task instance states after which no try of it runs again unless someone clears it.
FINISHED = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})
#: States in which the task instance's current try is (or is about to be) running.
ACTIVE = frozenset({"running", "deferred", "queued", "scheduled", "restarting", "up_for_reschedule"})
#: Between two tries: the last one ended, the next is not scheduled yet (None: cleared, "no status").
BETWEEN_TRIES = frozenset({"up_for_retry", None})
#: How long work is left alone after it was made, and after its task instance ended.
DEFAULT_GRACE = timedelta(minutes=10)


@dataclass(frozen=True)
class TaskTry:
    """The task try that made a resource, as its labels, annotation or tags name it."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int

    @property
    def instance(self) -> tuple[str, str, str, int]:
        """The task instance (every try of it)."""
        return self.dag_id, self.task_id, self.run_id, self.map_index


@dataclass(frozen=True)
class InstanceState:
    """What Airflow says of a task instance now."""

    state: str | None
    try_number: int
    end_date: datetime | None = None


@dataclass(frozen=True)
class Resource:
    """A pod, training Job, its Service or a Batch job the provider made, still holding (or waiting for) capacity.

    ``adoptable``: a later try of the task may take it over (live, not marked checked; a Service never).
    ``grace_seconds``: a pod's ``terminationGracePeriodSeconds``, the operator's ``termination_grace_period``.
    ``held``: a pod that ended or is being deleted, kept in the API by the provider's finalizer
    (``utils.end_hold``) for a try to read its end; reaping removes the finalizer.
    """

    backend: str  # "kubernetes" or "batch"
    kind: str  # "pod", "job", "service" or "batch-job"
    name: str  # the object's name; a Batch job's id
    scope: str  # the namespace or the job queue
    task: TaskTry
    created: datetime
    status: str  # a pod's phase, a Job's "active", a Batch job's status
    adoptable: bool
    uid: str | None = None
    grace_seconds: int | None = None
    label: str | None = None  # a Batch job's name, shown beside its id
    held: bool = False


def orphan_reason(
    resource: Resource,
    instance: InstanceState | None,
    *,
    now: datetime,
    grace: timedelta = DEFAULT_GRACE,
    later_try_has_work: bool = False,
) -> str | None:
    """Why ``resource`` is an orphan, or None when it is to be kept.

    :param instance: Airflow's task instance of the resource's task; None when Airflow has none
        (the run, or the task in it, no longer exists).
    :param later_try_has_work: another resource of the same task instance, made by a later try,
        is still live: the later try did not take this one over.
    """
    made = resource.task.try_number
    if now - resource.created < grace:
        return None
    if instance is None:
        return "Airflow has no such task instance (its run or task was deleted)"
    state, current = instance.state, instance.try_number
    if state in FINISHED:
        if instance.end_date is not None and now - instance.end_date < grace:
            return None  # the operator's own cleanup may still be at work
        if made < current:
            return f"made by try {made}; the task instance is {state} at try {current}"
        return f"the task instance is {state}"
    if made > current:
        return f"made by try {made}, but Airflow's task instance is at try {current}: the run was made anew"
    if state not in ACTIVE and state not in BETWEEN_TRIES:
        return None  # a state this rule does not know: kept
    may_be_taken_over = resource.adoptable and not later_try_has_work
    if made < current:
        if may_be_taken_over:
            return None  # try ``current`` may have reattached to it
        why = "has work of its own" if later_try_has_work else "cannot take it over"
        return f"made by try {made}; try {current} ({state or 'no status'}) {why}"
    if state in ACTIVE:
        return None
    if may_be_taken_over:
        return None  # left for the next try to take over (``operators.retry_handover``)
    return f"try {made} ended ({state or 'no status'}) and no later try can take it over"
