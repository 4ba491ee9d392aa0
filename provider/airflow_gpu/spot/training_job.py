"""How a training Job ended: an Indexed Job of machines with ``backoffLimit: 0``, from the API's objects.

A training over several Kubernetes machines is one Indexed Job (``operators.accelerate_kubernetes``).
It is watched either from the worker (polling) or from the triggerer (a shared watch); both hand
what they saw here, so both reach the same verdict, and a deferred training is classified exactly
as a watched one.

The Job's end is the Job controller's, read off the Job's conditions rather than re-derived from
the pods. With ``backoffLimit: 0`` the first failed rank adds ``FailureTarget``, the controller
deletes the other ranks and, since Kubernetes 1.31, adds ``Failed`` once none of them is still
terminating; ``Complete`` follows the last index's success. Some ends show in no pod at all:
``activeDeadlineSeconds`` (``DeadlineExceeded``: the controller deletes the ranks, which then look
deleted by a person), a Job deleted with the API's default propagation for ``batch/v1`` (orphan:
the pods run on), a Job that a queue (Kueue) suspends. The pods say *why* it ended: a rank that a
reclaim killed explains the ranks that then lost their peer (an application error) and the ones
the controller deleted, hence ``CAUSE_ORDER``.

Three ends the controller never declares are the caller's to time: a rank that cannot be scheduled,
or cannot start (an image that does not pull), waits for ever while the others wait for it at the
rendezvous (``StuckClock``); and a rank the API server refuses to create (a ResourceQuota on
``requests.nvidia.com/gpu`` used up, a LimitRange, PodSecurity, a policy webhook) never exists at
all: the Job controller records a ``FailedCreate`` event and tries again with back-off, sets no
condition, and the ranks it did create hold their GPUs at the rendezvous (``MissingRanks``).

Input is the Kubernetes API's dicts, as ``spot.classifier`` takes them; no Airflow, no client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_gpu.spot import admission
from airflow_gpu.spot.classifier import (
    Classification,
    Outcome,
    classify_deleted_pod,
    classify_pod,
    finished_with_result,
)

#: The label and annotation the Job controller puts on each pod: its completion index, the machine rank.
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
#: What ended a Job, most telling first.
CAUSE_ORDER = (
    Outcome.PREEMPTED,
    Outcome.EVICTED,
    Outcome.UNSCHEDULABLE,
    Outcome.INFRASTRUCTURE,
    Outcome.APPLICATION,
    Outcome.UNKNOWN,
    Outcome.DELETED,
)
#: Whether a node is there to stay (``classifier.node_stays``), by node name; None: not known.
NodeStays = Callable[[str | None], bool | None]


def rank_of(pod: Mapping[str, Any]) -> str | None:
    """The pod's machine rank: the controller's label (Kubernetes 1.28+), else its annotation."""
    metadata = pod.get("metadata") or {}
    return (metadata.get("labels") or {}).get(INDEX_KEY) or (metadata.get("annotations") or {}).get(INDEX_KEY)


def node_of(pod: Mapping[str, Any] | None) -> str | None:
    return ((pod or {}).get("spec") or {}).get("nodeName")


@dataclass
class JobPods:
    """Every pod of one Job seen so far, each in its last state; ``gone``: the ones the API no longer has.

    A rank the controller deleted is still here in its last state, so that it is classified (a
    reclaimed node) and its rank known.
    """

    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)

    def listed(self, current: Mapping[str, dict[str, Any]]) -> None:
        """A complete listing of the Job's pods (the worker's poll): the ones missing from it are gone."""
        self.seen.update(current)
        self.gone |= set(self.seen) - set(current)

    def record(self, name: str, pod: dict[str, Any] | None, deleted: bool) -> None:
        """One pod's state from a watch; a deleted pod keeps its last state."""
        if pod is not None:
            self.seen[name] = pod
        if deleted:
            self.gone.add(name)

    def current(self) -> list[dict[str, Any]]:
        return [pod for name, pod in self.seen.items() if name not in self.gone]

    def main(self) -> dict[str, Any] | None:
        """The main machine's pod (rank 0), the last one seen."""
        mains = [pod for pod in self.seen.values() if rank_of(pod) == "0"]
        return mains[-1] if mains else None

    def nodes_to_check(self) -> set[str]:
        """The nodes whose fate ``cause`` asks about: those of gone pods and of pods still running."""
        return {
            node
            for name, pod in self.seen.items()
            if (node := node_of(pod)) and (name in self.gone or classify_pod(pod).outcome is Outcome.RUNNING)
        }


@dataclass(frozen=True)
class Candidate:
    """One pod's account of the Job's end.

    ``seen``: the pod itself says how it ended (a container's exit, a ``DisruptionTarget`` condition,
    a kubelet's reason); otherwise it is inferred from its disappearance and its node's fate.
    ``at``: when it ended (a container's ``finishedAt``, the condition's time, when its deletion
    was asked for), None when nothing says.
    """

    result: Classification
    pod: dict[str, Any]
    seen: bool
    at: datetime | None
    node_known: bool


def _time(value: Any) -> datetime | None:
    """An API timestamp (RFC 3339, whole seconds) as an aware datetime; None if absent or not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def ended_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod's end began: its ``DisruptionTarget``'s time (a reclaim starts there, before its
    containers' SIGTERM exits), else its containers' last ``finishedAt``, else when its deletion was
    asked for (``deletionTimestamp`` is that moment plus the grace period)."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        disrupted = condition.get("type") == "DisruptionTarget" and condition.get("status") == "True"
        if disrupted and (at := _time(condition.get("lastTransitionTime"))):
            return at
    finished = [
        at
        for key in ("initContainerStatuses", "containerStatuses")
        for container in status.get(key) or []
        if (at := _time(((container.get("state") or {}).get("terminated") or {}).get("finishedAt")))
    ]
    if finished:
        return max(finished)
    metadata = pod.get("metadata") or {}
    deletion = _time(metadata.get("deletionTimestamp"))
    if deletion is None:
        return None
    return deletion - timedelta(seconds=int(metadata.get("deletionGracePeriodSeconds") or 0))


def candidates(pods: JobPods, node_stays: NodeStays) -> list[Candidate]:
    """Every pod's account of the end, where it has one."""
    found: list[Candidate] = []
    for name, pod in pods.seen.items():
        node = node_of(pod)
        own = classify_pod(pod)
        seen = own.outcome in CAUSE_ORDER and own.outcome not in (Outcome.UNKNOWN, Outcome.DELETED)
        stays = None
        if name in pods.gone and not seen:  # the controller deletes a failed Job's ranks: only a node gone is a reclaim
            stays = node_stays(node)
            result = classify_deleted_pod(pod, stays)
        elif own.outcome is Outcome.RUNNING and node and (stays := node_stays(node)) is False:
            result = classify_deleted_pod(pod, False)  # its node is going or went away without a word
        else:
            result = own
        if result.outcome in CAUSE_ORDER:
            found.append(
                Candidate(result, pod, seen, ended_at(pod) if seen or name in pods.gone else None, stays is not None)
            )
    return found


def cause(
    pods: JobPods, node_stays: NodeStays, failed_at: datetime | None = None
) -> tuple[Classification, dict[str, Any] | None]:
    """What ended the Job and the pod that tells it; (RUNNING, None) when no pod tells anything yet.

    The culprit is the earliest end that a pod itself reports (its container's exit, a
    ``DisruptionTarget``): with ``backoffLimit: 0`` the Job controller deletes the healthy ranks the
    moment one fails, and those deletions, or a peer that merely sits on a cordoned node, must not
    turn a deterministic bug into a "spot interruption" that is resubmitted up to seven times. So a
    rank whose end is only inferred (gone without a word, its node going) counts only when it ended
    before every reported end and before the Job was judged failed (``failed_at``), and only when
    its node could be read: without ``get nodes`` a guess never outranks a container's own exit. At
    the same second (the API's timestamps have no finer grain) the most telling cause wins
    (``CAUSE_ORDER``): a reclaimed rank explains the peer that then lost it. With no reported end at
    all, the inferred ones decide, most telling first, as before.
    """
    found = candidates(pods, node_stays)
    if not found:
        return Classification(Outcome.RUNNING, "Running"), None

    def rank(candidate: Candidate) -> tuple[datetime, int]:
        return (candidate.at or datetime.max.replace(tzinfo=timezone.utc), CAUSE_ORDER.index(candidate.result.outcome))

    reported = [c for c in found if c.seen]
    if not reported:
        best = min(found, key=lambda c: CAUSE_ORDER.index(c.result.outcome))
        return best.result, best.pod
    first = min(reported, key=rank)
    earlier = [
        c
        for c in found
        if not c.seen
        and c.node_known
        and c.at is not None
        and (first.at is None or c.at < first.at)
        and (failed_at is None or c.at < failed_at)
    ]
    best = min(earlier, key=rank) if earlier else first
    return best.result, best.pod


def _true_conditions(job: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    conditions = (job.get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c for c in conditions if c.get("status") == "True"}


def judged(job: Mapping[str, Any] | None) -> bool:
    """Whether the controller has judged the Job: complete, or failed (or about to be)."""
    conditions = _true_conditions(job or {})
    return bool({"Complete", "SuccessCriteriaMet", "Failed", "FailureTarget"} & set(conditions))


def failing(job: Mapping[str, Any] | None) -> bool:
    """Whether the controller has judged the Job failed (``cause`` then needs the nodes' fate)."""
    conditions = _true_conditions(job or {})
    return "Failed" in conditions or "FailureTarget" in conditions


def adoptable(job: Mapping[str, Any]) -> bool:
    """Whether a new try may take the Job over: running or complete (its result is there to read), not
    judged failed and not being deleted (a try that was killed deleted it)."""
    return not failing(job) and not (job.get("metadata") or {}).get("deletionTimestamp")


@dataclass
class JobEnd:
    """How a training Job ended, the pod that tells it, and every pod seen of it."""

    result: Classification
    culprit: dict[str, Any] | None
    pods: JobPods


def job_end(
    job: Mapping[str, Any] | None, pods: JobPods, node_stays: NodeStays, name: str, now: datetime | None = None
) -> tuple[Classification, dict[str, Any] | None] | None:
    """How the Job ended and the pod that tells it, or None while it runs.

    ``job`` is the Job as last read (None: the API no longer has it); ``now``: the time (default: the clock's).
    """
    if job is None:
        return Classification(Outcome.DELETED, "JobDeleted", f"Job {name} was deleted"), None
    conditions = _true_conditions(job)
    success = Classification(Outcome.SUCCEEDED, "Succeeded", exit_code=0)
    if "Complete" in conditions:
        if finished_with_result(pods.main()):
            return success, pods.main()
        return stopped_rank(pods) or (success, pods.main())
    judged = conditions.get("Failed") or conditions.get("FailureTarget")
    if judged is None:
        return None
    reason, message = judged.get("reason") or "Failed", judged.get("message") or ""
    main = pods.main()
    if finished_with_result(main):
        # The training finished, whatever failed the Job: its main machine printed its result and exited 0 of its
        # own accord, which it cannot do while a peer it still needs is gone or failing (its next collective fails
        # or hangs), nor once a deadline's or a deletion's SIGTERM reached it. So the rest ended past the last
        # collective: a machine lost at torch's exit barrier or aborted as its process group was torn down (the
        # tenth soak: SIGABRT once rank 0 had printed its result), one lingering there past
        # ``activeDeadlineSeconds``, or one whose end the pods as read do not show yet (a listing behind the
        # Job; the slice beside the suite). A run again would train anew.
        told = f"the main machine finished with its result; {_after_the_main(pods, node_stays, judged, name)}"
        return Classification(Outcome.SUCCEEDED, "Succeeded", told, exit_code=0), main
    if main_ending(pods, judged, now or datetime.now(timezone.utc)):
        return None  # it may still finish with its result in its grace period: its end decides
    if reason == "DeadlineExceeded":  # the controller deleted the ranks: they say nothing of it
        return Classification(Outcome.UNKNOWN, reason, f"Job {name}: {message} (activeDeadlineSeconds)"), None
    result, culprit = cause(pods, node_stays, _time(judged.get("lastTransitionTime")))
    if result.outcome is not Outcome.RUNNING:
        return result, culprit
    if "Failed" in conditions:  # final, and no pod that was seen tells why
        return Classification(Outcome.UNKNOWN, reason, f"Job {name} failed: {message}"), None
    return None  # FailureTarget: the failed rank's state is on its way


#: How long past its kill deadline a machine's end may take to show (the kubelet's SIGKILL and status update, the
#: watch or the next listing) before the Job is judged without it.
END_SHOWS_WITHIN = timedelta(seconds=15)
#: A pod's ``terminationGracePeriodSeconds`` when its spec as read does not say (the API's default).
DEFAULT_GRACE_SECONDS = 30


def _ended(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def main_ending(pods: JobPods, judged: Mapping[str, Any], now: datetime) -> bool:
    """Whether the Job was judged failed while its main machine has not ended yet, before its kill deadline (or,
    not deleted yet, its grace period from the judgement) and ``END_SHOWS_WITHIN``.

    A drain evicts every machine of a Job at once: machine 1 exits 143 on the SIGTERM and the controller judges
    the Job failed (``FailureTarget``, and ``Failed`` only once no machine is terminating, from Kubernetes 1.31;
    ``Failed`` at once before), while the main machine, in its last step, may still print its result and exit 0
    in its grace period: a finished training (the sixteenth soak judged such a Job 30 ms before its main machine
    finished, and trained again). So its end is waited for, whatever its node's fate: a drained node is cordoned
    but its kubelet still reports. A main machine gone from the API shows no end; one on a node lost without a
    word is failed by the pod garbage collector when the node object goes, else waited for until the bound; the
    Job's replacement waits for such a pod anyway (the old Job must be gone first), so the wait adds little.
    The bound is the pod's kill deadline (``deletionTimestamp``), else, not deleted yet, its grace period from the
    judgement. Without a time to count from, nothing is waited for. The times are the API server's, ``now`` the
    caller's: a skewed clock moves the bound by its skew."""
    main = pods.main()
    if main is None or _ended(main) or (main.get("metadata") or {}).get("name") in pods.gone:
        return False
    deadline = _time((main.get("metadata") or {}).get("deletionTimestamp"))  # the kubelet's SIGKILL comes then
    if deadline is None and (judged_at := _time(judged.get("lastTransitionTime"))):  # its deletion is next
        grace = (main.get("spec") or {}).get("terminationGracePeriodSeconds")
        deadline = judged_at + timedelta(seconds=int(DEFAULT_GRACE_SECONDS if grace is None else grace))
    return deadline is not None and now < deadline + END_SHOWS_WITHIN


def _after_the_main(pods: JobPods, node_stays: NodeStays, judged: Mapping[str, Any], name: str) -> str:
    """What failed a Job whose main machine had finished, for the task log: the other machine whose end tells
    it, else the Job's own condition."""
    reason, message = judged.get("reason") or "Failed", judged.get("message") or ""
    if reason == "DeadlineExceeded":
        return f"Job {name} then ran past its deadline: {message}"
    result, culprit = cause(pods, node_stays, _time(judged.get("lastTransitionTime")))
    if result.outcome is not Outcome.RUNNING and culprit is not None and rank_of(culprit) != "0":
        return f"machine {(culprit.get('metadata') or {}).get('name')} then ended: {result.message}"
    return f"Job {name} failed ({reason}: {message}), no pod telling why"


def stopped_rank(pods: JobPods) -> tuple[Classification, dict[str, Any]] | None:
    """A rank whose success was a stop: it exited 0 on a drain's or a deletion's SIGTERM, as the profiler's end
    tells (``classifier.ended_on_a_deletion_signal``), so the controller counted its index complete, and the Job
    ``Complete``, without that machine having finished. The most telling one (``CAUSE_ORDER``), or None.
    A single pod's run is judged the same way (``classify_pod``); unprofiled, the phase stands. Asked only when
    the main machine did not finish with its result (``job_end``)."""
    stopped = [
        (result, pod)
        for pod in pods.seen.values()
        if (pod.get("status") or {}).get("phase") == "Succeeded"
        and (result := classify_pod(pod)).outcome is not Outcome.SUCCEEDED
    ]
    if not stopped:
        return None
    order = {outcome: place for place, outcome in enumerate(CAUSE_ORDER)}
    return min(stopped, key=lambda found: order.get(found[0].outcome, len(order)))


class StuckClock:
    """Since when some rank cannot be scheduled, or cannot start; past its timeout, that rank's reason ends
    the Job. A rank that waits never fails the Job by itself: the others wait for it at the rendezvous."""

    def __init__(self, timeouts: Mapping[Outcome, float]) -> None:
        self.timeouts = dict(timeouts)
        self.since: dict[Outcome, float] = {}

    def check(self, pods: Iterable[Mapping[str, Any]], now: float) -> tuple[Classification, dict[str, Any]] | None:
        current = list(pods)
        for kind, timeout in self.timeouts.items():
            blocked = [p for p in current if classify_pod(p).outcome is kind]
            if not blocked:
                self.since.pop(kind, None)
            elif now - self.since.setdefault(kind, now) > timeout:
                return classify_pod(blocked[0]), dict(blocked[0])
        return None


#: The Job controller's event reason for a pod create the API refused (``FailedCreatePodReason``).
FAILED_CREATE = "FailedCreate"


def failed_create_messages(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """The messages of a Job's ``FailedCreate`` events (API dicts), oldest first: what the API server
    said when it refused a rank ("Error creating: pods ... is forbidden: exceeded quota: ...")."""
    refused = [e for e in events if e.get("reason") == FAILED_CREATE]
    refused.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or ""))
    return [str(e.get("message") or "") for e in refused]


class MissingRanks:
    """Since when the Job has had fewer pods than ``parallelism``; past the timeout, how many are missing.

    A refused pod create leaves no trace but ``FailedCreate`` events: no pod, no Job condition, so no
    other clock runs. Partly admitted (some ranks created), the created ranks wait at the rendezvous,
    holding their GPUs, until the launcher gives up and the Job fails as if the application had.
    A judged or suspended Job is not waiting for ranks.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.since: float | None = None

    def check(
        self, job: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]], now: float, expected: int | None = None
    ) -> int | None:
        """``expected``: the Job's ``parallelism`` when ``job`` lacks its spec (the triggerer keeps Jobs slim)."""
        spec = (job or {}).get("spec") or {}
        expected = int(spec.get("parallelism") or 0) if expected is None else expected
        missing = expected - len(list(pods))
        if job is None or judged(job) or spec.get("suspend") is True or missing <= 0:
            self.since = None
            return None
        if self.since is None:
            self.since = now
        return missing if now - self.since > self.timeout else None


def refused(
    name: str, missing: int, expected: int, timeout: float, events: Iterable[str], namespace: str | None = None
) -> Classification:
    """A Job whose ranks the API would not create, told with the latest ``FailedCreate`` message (the API
    server's words: ``pods "x" is forbidden: exceeded quota: ...``). Not a capacity shortage: no other
    placement changes a namespace's quota or policy, so it is infrastructure that is not transient."""
    messages = list(events)
    why = messages[-1] if messages else "no FailedCreate event of the Job says why (events expire after an hour)"
    step = f"; {admission.read(why, namespace).what_to_do()}" if messages else ""
    return Classification(
        Outcome.INFRASTRUCTURE,
        FAILED_CREATE,
        f"{missing} of {expected} machines of Job {name} were not created for longer than "
        f"startup_timeout_seconds={timeout:g}: {why}{step}",
    )


def to_json(result: Classification) -> dict[str, Any]:
    """A classification as it travels in a trigger's event."""
    return {**asdict(result), "outcome": result.outcome.value}


def from_json(data: Mapping[str, Any]) -> Classification:
    return Classification(
        Outcome(data["outcome"]),
        str(data.get("reason") or ""),
        str(data.get("message") or ""),
        data.get("exit_code"),
        bool(data.get("transient")),
    )
