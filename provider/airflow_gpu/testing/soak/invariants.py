"""The soak's promises, judged over the whole history: the observer's pods and jobs, the injector's
faults, and Airflow's task instances and XComs read through the REST API at the end.

Each check returns its violations as text lines; an empty list is a pass. ``Verdict`` keeps the
counts the report prints (a check with nothing to judge is said so, not passed silently).
"""

from __future__ import annotations

import itertools
import json
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu.spot.training_job import INDEX_KEY
from airflow_gpu.testing.soak.faults import Fault
from airflow_gpu.testing.soak.observer import TryKey, Workload

#: A Batch job's end is read every half second: overlaps shorter than this are the reading's, not real.
BATCH_SLACK = 1.0
REST_FAULTS = ("mark_failed", "mark_success", "clear_running")
#: Reclaims of a pod or job that had not ended: each is an interruption of the try it hit, and a re-run.
#: A Kubernetes reclaim is none when its pod had exited 0 first (``Fault.pod_outcome``, ``interrupting``).
RECLAIMS = (
    "k8s_reclaim_running", "k8s_reclaim_pending", "k8s_reclaim_pulling", "k8s_reclaim_after_result", "batch_reclaim",
    "batch_node_loss",
)  # fmt: skip
#: Reclaims judged by ``reclaims_by_phase``, each by what it allows.
PHASE_RECLAIMS = ("k8s_reclaim_pulling", "k8s_reclaim_after_result", "k8s_reclaim_after_success")
KILLS = ("kill_worker", "kill_scheduler", "kill_triggerer", "pg_terminate_backend", "redis_restart")
#: Faults that can keep a queued task from any worker: a Redis restart empties the queue (no
#: persistence), a killed worker's reserved messages wait for the broker's visibility timeout, and a
#: worker whose consumer just reconnected may hold a message it received without running it (the
#: thirteenth soak: received 24 s after a restart, never started, revoked 55 s later).
BROKER_FAULTS = ("redis_restart", "kill_worker")
#: How long before a stuck period's start a broker fault still explains it: a reconnect's aftermath.
BROKER_AFTERMATH = 60.0
#: Airflow's event-log names for a task requeued, then failed, for sitting queued past
#: ``[scheduler] task_queued_timeout`` (``SchedulerJobRunner._maybe_requeue_stuck_ti``).
STUCK_REQUEUED = "stuck in queued reschedule"
STUCK_FAILED = "stuck in queued tries exceeded"
#: The event the Execution API logs when a try starts running: Airflow counts a try's requeues from its last one
#: (``_get_num_times_stuck_in_queued``), as a deferred task resumes under the same try number.
RUNNING = "running"


@dataclass
class Verdict:
    name: str
    checked: int
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def interrupting(fault: Fault) -> bool:
    """Whether ``fault`` reclaimed a pod or job before it ended: an interruption of its try. A pod that had
    exited 0 first (the soak's workloads exit 143 on the reclaim's SIGTERM, so ``Succeeded`` is an exit of its
    own) was not interrupted, whatever phase the fault aimed at: an ``after_result`` reclaim often comes after
    the exit, and a ``running`` one may (the twentieth soak's met a shard 240 ms after it had exited 0 with its
    result: the observer still had it Running; the provider read a success and recorded nothing, rightly)."""
    if fault.kind not in RECLAIMS or fault.outcome != "injected":
        return False
    if fault.kind == "batch_node_loss":  # Batch fails the node alone: the job ends FAILED only if the main node
        return fault.pod_outcome == "FAILED"  # did not finish first (the provider then resubmits it)
    return not (fault.kind.startswith("k8s_") and fault.pod_outcome == "Succeeded")


def machines(workloads: Iterable[Workload]) -> list[Workload]:
    """``workloads`` with each training Job's pods (its machines, live together) as one, live from
    its first pod's creation until its last pod's end."""
    out: list[Workload] = []
    jobs: dict[tuple[TryKey | None, str], list[Workload]] = defaultdict(list)
    for w in workloads:
        if w.backend == "kubernetes" and w.group:
            jobs[(w.key, w.group)].append(w)
        else:
            out.append(w)
    for (key, group), pods in jobs.items():
        ends = [p.ended for p in pods]
        ended = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
        out.append(Workload("kubernetes", f"Job {group}", key, min(p.created for p in pods), ended=ended))
    return out


def one_live_per_try(workloads: Iterable[Workload]) -> Verdict:
    """Never two live pods (or Batch jobs, or training Jobs' sets of pods) of one task try at the
    same moment: the ranks of one training Job live together, two Jobs of one try never."""
    by_try: dict[tuple[str, TryKey], list[Workload]] = defaultdict(list)
    for w in machines(workloads):
        if w.key is not None:
            by_try[(w.backend, w.key)].append(w)
    verdict = Verdict("one live pod/job per task try", len(by_try))
    for (backend, key), items in sorted(by_try.items()):
        items.sort(key=lambda w: w.created)
        slack = BATCH_SLACK if backend == "batch" else 0.0
        for earlier, later in itertools.pairwise(items):
            ended = earlier.ended if earlier.ended is not None else float("inf")
            if later.created + slack < ended:
                verdict.violations.append(
                    f"{backend} {key}: {later.name} created at {later.created:.3f} while {earlier.name} was live "
                    f"(ended {ended:.3f})"
                )
    return verdict


def no_orphans(
    live_at_end: Sequence[Workload],
    reap_output: str,
    reap_found: int,
    faults: Sequence[Fault] = (),
    trigger_seen: Mapping[TryKey, float] | None = None,
) -> tuple[Verdict, list[str]]:
    """Nothing of the soak's (pod, Batch job, training Job or Service) is live once every run has
    ended and the grace period passed, and ``airflow-gpu reap`` agrees. A pod the provider's finalizer
    still holds once it ended (``utils.end_hold``: its try died before it let go) runs nothing: it is
    the reaper's to let go (``held_by_reap``), not an orphan. Nor is what a mark left while the try's trigger
    ran nowhere (``stranded_by_a_mark``), when the reaper finds it; returned apart, with the mark that left it."""
    verdict = Verdict("no pod/job alive after its task ended", len(live_at_end) + 1)
    reaped = {name.rsplit("/", 1)[-1] for name in reaped_names(reap_output)}
    stranded: list[str] = []
    for w in live_at_end:
        last = w.statuses[-1][1] if w.statuses else "?"
        mark = stranded_by_a_mark(w, faults, trigger_seen or {})
        if mark is not None and w.name in reaped:
            stranded.append(f"{w.backend} {w.name} of {w.key}: left by #{mark.number} {mark.kind}, found by reap")
            continue
        verdict.violations.append(f"{w.backend} {w.name} of {w.key} still live ({last})")
    live = reap_found - len(held_by_reap(reap_output)) - len(stranded)
    if live:
        verdict.violations.append(f"airflow-gpu reap found {live} live orphan(s):\n{reap_output}")
    return verdict, stranded


#: Airflow's ``[triggerer] triggerer_health_check_threshold`` (its default, the soak's): how long the triggers of a
#: killed triggerer wait before another triggerer takes them.
TRIGGER_REASSIGN_SECONDS = 30.0


def stranded_by_a_mark(w: Workload, faults: Sequence[Fault], trigger_seen: Mapping[TryKey, float]) -> Fault | None:
    """The Mark Failed or Mark Success that left ``w`` behind while its try's trigger ran nowhere: the try was
    deferred, a triggerer was killed at most ``TRIGGER_REASSIGN_SECONDS`` before the mark, and the try's trigger
    wrote nothing from that kill on. Airflow then runs no code of the provider for the try (no trigger to cancel,
    no task process): production notes, "A deferred task marked failed before any triggerer picked up its
    trigger". The reaper's to find; the seventeenth soak's Service of a replacement Job its killed trigger had
    not created yet. A limit: it does not tell which triggerer ran the trigger, so the kill of the other one
    counts too; the trigger log's silence since the kill and the reaper's finding are the guards."""
    if w.key is None:
        return None
    kills = [f.at for f in faults if f.kind == "kill_triggerer" and f.outcome == "injected"]
    for mark in faults:
        if mark.kind not in ("mark_failed", "mark_success") or mark.outcome != "injected" or mark.key != w.key:
            continue
        if mark.detail != "was deferred":
            continue
        if any(mark.at - TRIGGER_REASSIGN_SECONDS <= k <= mark.at and trigger_seen.get(w.key, 0.0) < k for k in kills):
            return mark
    return None


def reaped(reap_output: str) -> list[dict[str, Any]]:
    """What ``airflow-gpu reap --output json`` found; nothing when its output is not that (a reap that failed)."""
    try:
        orphans = json.loads(reap_output).get("orphans") or []
    except (ValueError, AttributeError):
        return []
    return [o for o in orphans if isinstance(o, dict)]


def reaped_names(reap_output: str) -> list[str]:
    """The names the reaper found (``service/<name>`` for a Service)."""
    return [str(o.get("name")) for o in reaped(reap_output)]


def held_by_reap(reap_output: str) -> list[str]:
    """The ended pods the reaper found held (``utils.end_hold``), by name."""
    return [str(o.get("name")) for o in reaped(reap_output) if "held" in str(o.get("status"))]


def no_start_after_success(workloads: Iterable[Workload], faults: Sequence[Fault]) -> Verdict:
    """Once a pod or job of a task instance succeeded, none is started for it again, unless the
    injector cleared that task instance after the success, or cleared the try that made it before it
    succeeded (a Clear of a running try asks for a new try, which runs the workload again: the killed
    try's pod may still finish while its task is being stopped). A pod that exited 0 with its result after its
    deletion was asked (``Workload.finished``) succeeded too, from when it was seen so. Another machine of a
    training Job than the main one exits 0 once the last gather is done, before the main one prints the
    result: when a reclaim or a drain hit that Job, the main machine may have been stopped in between and
    left no result, so the training runs again, rightly (the nineteenth soak judged such a replacement as a
    start after a success), and only the main machine's success is the training's. Without a fault on the
    Job, any machine's success counts: a provider that ended the Job on another machine's success, before
    the main one's result, and trained again, is caught."""
    cleared: dict[tuple[str, str, str, int], list[float]] = defaultdict(list)
    cleared_tries: dict[TryKey, float] = {}
    for f in faults:
        if f.kind == "clear_running" and f.instance is not None and f.outcome == "injected":
            cleared[f.instance].append(f.at)
            if f.key is not None:
                cleared_tries[f.key] = min(f.at, cleared_tries.get(f.key, f.at))
    by_instance: dict[tuple[str, str, str, int], list[Workload]] = defaultdict(list)
    for w in workloads:
        if w.instance is not None:
            by_instance[w.instance].append(w)
    hit = {f.group for f in faults if interrupting(f) and f.group}
    evicted = {name for f in faults if f.kind == "k8s_node_drain" and f.outcome == "injected" for name in f.evicted}
    verdict = Verdict("no pod/job started again after a success", len(by_instance))
    for instance, items in sorted(by_instance.items()):
        hit_jobs = hit | {w.group for w in items if w.group and w.name in evicted}
        ends = [(w, w.ended if w.outcome in ("Succeeded", "SUCCEEDED") else w.finished_at) for w in items
                if w.group not in hit_jobs or (w.marks.get("labels") or {}).get(INDEX_KEY) == "0"]  # fmt: skip
        succeeded = [
            at for w, at in ends
            if at is not None and not (w.key is not None and w.key in cleared_tries and cleared_tries[w.key] <= at)
        ]  # fmt: skip
        if not succeeded:
            continue
        first = min(succeeded)
        for w in items:
            if w.created > first and not any(first <= at <= w.created for at in cleared.get(instance, [])):
                verdict.violations.append(f"{instance}: {w.name} created {w.created - first:.1f}s after a success")
    return verdict


def final_states(
    instances: Sequence[dict[str, Any]],
    faults: Sequence[Fault],
    retries: int,
    stuck: Mapping[tuple[str, str, str, int], Sequence[tuple[float, str]]] | None = None,
    queued_timeout: float = 600.0,
) -> tuple[Verdict, dict[str, int]]:
    """A GPU task ends success unless a person marked it failed, it ran out of retries to faults
    that kill task tries (a worker, the scheduler, the database's connections), or Airflow failed it
    for sitting queued while the broker was disturbed: then failed.

    That last is Airflow's design (apache/airflow#43520): a task queued past ``task_queued_timeout`` is sent again
    ``num_stuck_in_queued_retries`` times, then failed without using its retries. It is allowed only when ``stuck``
    (each instance's stuck events of its last try, ``(epoch, event)`` from Airflow's event log, counted from its
    last ``running`` as Airflow counts them) ends in the failure and a broker fault fell in every stuck period: from
    the event before (the first: ``queued_timeout`` before it, the latest it can have been queued), less
    ``BROKER_AFTERMATH``, to the event. A task that waited for a busy worker, or that a soak without broker faults
    failed so, is a violation; the tally counts these apart. It is a bound, not a proof: the full soak injects a
    broker fault every 45 s or so, so most stuck periods hold one; a rise in that count is what to look into."""
    marked: dict[tuple[str, str, str, int], str] = {}
    for f in sorted(faults, key=lambda f: f.at):
        if f.kind in ("mark_failed", "mark_success") and f.instance is not None and f.outcome == "injected":
            marked[f.instance] = "failed" if f.kind == "mark_failed" else "success"
    kills = sum(1 for f in faults if f.kind in KILLS and f.outcome == "injected")
    verdict = Verdict("final states allowed by the faults", len(instances))
    tally: dict[str, int] = defaultdict(int)
    for ti in instances:
        instance = (ti["dag_id"], ti["task_id"], ti["dag_run_id"], ti["map_index"])
        state = ti["state"]
        events = _since_last_running((stuck or {}).get(instance, ()))
        if state == "failed" and events and events[-1][1] == STUCK_FAILED:
            tally["failed: stuck in queued"] += 1
            unexplained = _stuck_unexplained(events, faults, queued_timeout)
            if unexplained:
                when = ", ".join(time.strftime("%H:%M:%S", time.localtime(t)) for t in unexplained)
                verdict.violations.append(f"{instance}: failed stuck in queued; no broker fault before {when}")
            continue
        tally[state or "none"] += 1
        if ti["task_id"] not in ("score_shard", "train"):
            if state not in ("success", "upstream_failed"):
                verdict.violations.append(f"{instance}: {state}")
            continue
        allowed = {"success"}
        if instance in marked:
            allowed = {marked[instance], "success"}  # a clear or retry after the mark may still succeed
        if kills and ti["try_number"] > retries:
            allowed.add("failed")  # out of retries, each try lost to a kill
        if state not in allowed:
            verdict.violations.append(f"{instance}: {state} (allowed {sorted(allowed)}, try {ti['try_number']})")
    return verdict, dict(tally)


def _since_last_running(events: Sequence[tuple[float, str]]) -> list[tuple[float, str]]:
    """The stuck events Airflow counts: those after the try's last ``running`` event, oldest first."""
    ordered = sorted(events)
    starts = [n for n, (_, event) in enumerate(ordered) if event == RUNNING]
    return ordered[starts[-1] + 1 :] if starts else ordered


def _stuck_unexplained(
    events: Sequence[tuple[float, str]], faults: Sequence[Fault], queued_timeout: float
) -> list[float]:
    """The stuck events whose period holds no injected broker fault (see ``final_states``)."""
    broker = [f.at for f in faults if f.kind in BROKER_FAULTS and f.outcome == "injected"]
    unexplained = []
    start = None
    for when, _ in sorted(events):
        begin = (when - queued_timeout if start is None else start) - BROKER_AFTERMATH
        if not any(begin <= at <= when for at in broker):
            unexplained.append(when)
        start = when
    return unexplained


def results(expected: dict[tuple[str, str, str, int], Any], actual: dict[tuple[str, str, str, int], Any]) -> Verdict:
    """Each successful GPU task's XCom is what its workload computes."""
    verdict = Verdict("XCom results equal the expected values", len(expected))
    for instance, want in sorted(expected.items()):
        got = actual.get(instance)
        if got != want:
            verdict.violations.append(f"{instance}: XCom {got!r}, expected {want!r}")
    return verdict


def finished_trainings(workloads: Iterable[Workload]) -> frozenset[str]:
    """The training Jobs whose main machine (rank 0) ended ``Succeeded``: the soak's training prints its result
    there at its end, so the training finished, whatever became of its other machines afterwards. A main machine
    whose deletion was asked before it ended counts when it exited 0 with its result of its own accord
    (``Workload.finished``): the fourteenth soak reclaimed machine 1 after the last epoch, the Job's controller
    deleted the main machine as it exited, and the provider rightly read a finished training."""
    return frozenset(
        w.group for w in workloads
        if w.group and (w.outcome == "Succeeded" or w.finished) and (w.marks.get("labels") or {}).get(INDEX_KEY) == "0"
    )  # fmt: skip


def interruptions(
    recorded: dict[tuple[str, str, str, int, int], int],
    faults: Sequence[Fault],
    drains: dict[TryKey, int],
    finished: frozenset[str] = frozenset(),
) -> Verdict:
    """The interruptions a successful try recorded (XCom ``gpu_interruptions``) equal the reclaims
    the injector made on that try's pods and jobs (a drain's eviction may count as one too). Reclaims
    of two machines of one training Job end that Job once: one interruption. A reclaim after the
    result line whose pod had exited 0 first, and a reclaim after success, are none. A try that took
    over an earlier try's pod or Job (``reattach_on_restart``: its worker was killed) records the
    reclaims that hit it after the takeover, though the pods carry the earlier try's number: the
    reclaims and drain evictions on an earlier try's workloads may count too (the seventh soak: a try
    that took over a pod its earlier try's trigger made after a drain carries that drain's interruption).
    Two faults that reclaimed one pod (each waits for a pod in its phase, and both may find the same one)
    end it once: one interruption (the sixth soak). A reclaim of a training machine whose Job's main machine
    finished (``finished``: ``finished_trainings``) is none: the training is done (the eighth soak reclaimed
    a machine at torch's exit barrier, and the provider then ran the finished training again)."""
    hits: dict[TryKey, set[Any]] = defaultdict(set)
    for f in faults:
        if interrupting(f) and f.key and not (f.group and f.group in finished):
            pod = f.target if (f.kind.startswith("k8s_") or f.kind == "batch_node_loss") and f.target else None
            hits[f.key].add(f.group or pod or f.number)
    verdict = Verdict("recorded interruptions equal the injected reclaims", len(recorded))
    for key, count in sorted(recorded.items()):
        low = len(hits.get(key, ()))
        adopted = sum(len(found) for other, found in hits.items() if other[:4] == key[:4] and other[4] < key[4])
        adopted += sum(n for other, n in drains.items() if other[:4] == key[:4] and other[4] < key[4])
        high = low + drains.get(key, 0) + adopted
        if not low <= count <= high:
            verdict.violations.append(
                f"{key}: {count} recorded, {low} reclaim(s) (+{drains.get(key, 0)} drain evictions, "
                f"+{adopted} on earlier tries' workloads)"
            )
    return verdict


def runs_within(runs: Sequence[dict[str, Any]], bound_seconds: float) -> Verdict:
    verdict = Verdict(f"every run finished within {bound_seconds:.0f} s", len(runs))
    for run in runs:
        if run.get("state") not in ("success", "failed"):
            verdict.violations.append(f"{run['dag_id']} {run['run_id']}: {run.get('state')} (not finished)")
        elif run["seconds"] > bound_seconds:
            verdict.violations.append(f"{run['dag_id']} {run['run_id']}: {run['seconds']:.0f} s")
    return verdict


def reclaims_by_phase(
    workloads: Sequence[Workload],
    faults: Sequence[Fault],
    instances: Sequence[dict[str, Any]],
    results: dict[tuple[str, str, str, int], Any],
) -> Verdict:
    """What a reclaim at each phase allows (interruptions are ``interruptions``' to count):

    * ``k8s_reclaim_pulling``: the pod never ran; the task runs the workload again (a pod of the
      task instance created after the reclaim).
    * ``k8s_reclaim_after_result``, the pod stopped before it exited: a preemption like any other,
      though its log carried the result line: the task runs the workload again. When the pod exited
      0 before the reclaim reached it, it is a reclaim after success (below).
    * ``k8s_reclaim_after_success``: the pod had succeeded; the task that was still reading it must
      take the success: no pod of the task instance is created after it, the task ends ``success``
      and its result XCom is there.

    A person's mark or clear of that task instance once the reclaimed pod existed excuses the re-run and
    the final state (the task is no longer the provider's to finish): a Mark Failed a second before the
    reclaim (the fault waits for a pod in its phase) ends the task as surely as one after it. A Mark Success
    or Mark Failed of the instance at any time does too: it is the instance's final state.
    """
    people: dict[tuple[str, str, str, int], list[float]] = defaultdict(list)
    for f in faults:
        if f.kind in REST_FAULTS and f.instance is not None and f.outcome == "injected":
            people[f.instance].append(f.at)
    # A Mark Success or Mark Failed sets the instance's final state for good, whenever it came: the try the
    # person ended may still make a pod before it hears of it (the tenth soak: marked success at 04.2 s, its pod
    # made at 06 s, succeeded, and was reclaimed), and neither that pod's success nor a result is the task's.
    marked = {f.instance for f in faults if f.kind in ("mark_success", "mark_failed") and f.outcome == "injected"}
    created: dict[tuple[str, str, str, int], list[tuple[float, str | None]]] = defaultdict(list)
    for w in workloads:
        if w.instance is not None and w.backend == "kubernetes":
            created[w.instance].append((w.created, w.group))
    # A fault is drawn, then waits up to AIM_SECONDS for a pod in its phase: its pod (even the one before)
    # may be created after ``f.at``. "Later" is after the reclaimed pod itself was created, and not one of
    # its own training Job's machines (made with it, a few milliseconds apart).
    born = {w.name: w.created for w in workloads if w.backend == "kubernetes"}
    states = {(t["dag_id"], t["task_id"], t["dag_run_id"], t["map_index"]): t["state"] for t in instances}
    # A pending or running reclaim whose pod (not a training's machine: another one may have been stopped) had
    # exited 0 first is a reclaim after success too (``interrupting``), and is judged as one.
    beaten = {id(f) for f in faults if f.kind in RECLAIMS and f.kind.startswith("k8s_") and not f.group
              and f.pod_outcome == "Succeeded"}  # fmt: skip
    judged = [f for f in faults if (f.kind in PHASE_RECLAIMS or id(f) in beaten) and f.outcome == "injected" and f.key]
    verdict = Verdict("each reclaim allowed what its phase allows", len(judged))
    for f in judged:
        assert f.key is not None
        instance = f.key[:4]
        since = born.get(f.target, f.at)
        if any(at >= min(since, f.at) for at in people.get(instance, [])) or instance in marked:
            continue
        later = sorted(
            at for at, group in created.get(instance, []) if at > since and (group is None or group != f.group)
        )
        success = f.kind == "k8s_reclaim_after_success" or f.pod_outcome == "Succeeded"
        where = f"#{f.number} {f.kind} of {f.target} ({instance})"
        if not success and not later:
            verdict.violations.append(f"{where}: the pod was reclaimed before it ended, and never run again")
        if success and later:
            again = later[0] - since
            verdict.violations.append(
                f"{where}: the pod had succeeded, and was run again (a pod made {again:.1f} s after it)"
            )
        if success and instance in states:
            if states[instance] != "success":
                verdict.violations.append(f"{where}: the pod had succeeded, and the task ended {states[instance]}")
            elif results.get(instance) is None:
                verdict.violations.append(f"{where}: the pod had succeeded, and the task has no result XCom")
    return verdict


def training_jobs(objects: Sequence[Workload]) -> Verdict:
    """A two-machine training has one live Job per task try at a time (created, until its deletion is
    requested), and each Job its headless Service of the same name."""
    jobs = [o for o in objects if o.backend == "job"]
    services = {(o.key, o.name) for o in objects if o.backend == "service"}
    by_try: dict[TryKey, list[Workload]] = defaultdict(list)
    for job in jobs:
        if job.key is not None:
            by_try[job.key].append(job)
    verdict = Verdict("one live training Job per task try, each with its Service", len(jobs))
    for key, items in sorted(by_try.items()):
        items.sort(key=lambda w: w.created)
        for earlier, later in itertools.pairwise(items):
            ended = earlier.ended if earlier.ended is not None else float("inf")
            if later.created < ended:
                verdict.violations.append(f"{key}: Job {later.name} created while Job {earlier.name} was live")
    for job in jobs:
        if (job.key, job.name) not in services:
            verdict.violations.append(f"{job.key}: Job {job.name} without its Service")
    return verdict


def training_results(
    values: dict[tuple[str, str, str, int], Any], check: Any, tries: dict[tuple[str, str, str, int], int] | None = None
) -> Verdict:
    """Each successful two-machine training's XCom is a whole training's result (``check(value,
    try_number=...)`` returns what is wrong with one, or None; ``tries``: the try that succeeded): its
    value depends on where a resumed run started, so it is judged by its shape, not compared with one value."""
    verdict = Verdict("training results are whole trainings", len(values))
    for instance, value in sorted(values.items()):
        problem = check(value, try_number=(tries or {}).get(instance, 1))
        if problem:
            verdict.violations.append(f"{instance}: {problem}: {value!r}")
    return verdict
