"""Which rank ended a training Job: the culprit, not the ranks the Job controller deleted after it.

The pods are shaped as the API returns them (``status.containerStatuses[].state.terminated``,
``DisruptionTarget`` conditions, ``deletionTimestamp`` with ``deletionGracePeriodSeconds``, whole-second
RFC 3339 times) for the Job controller's documented behaviour with ``backoffLimit: 0``: the first
failed rank adds ``FailureTarget``, then every other rank is deleted.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from airflow_gpu.spot.classifier import Outcome, finished_with_result
from airflow_gpu.spot.training_job import INDEX_KEY, JobPods, job_end

T0 = "2026-11-26T12:00:00Z"


def at(seconds: int) -> str:
    return f"2026-11-26T12:{seconds // 60:02d}:{seconds % 60:02d}Z"


def stamp(seconds: int) -> datetime:
    return datetime.fromisoformat(at(seconds).replace("Z", "+00:00"))


def pod(rank: int, node: str, *, exit_code: int | None = None, finished: int = 0, **extra: Any) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": T0}}
    phase = "Running"
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": T0, "finishedAt": at(finished)}}
        phase = "Failed" if exit_code else "Succeeded"
    body: dict[str, Any] = {
        "metadata": {"name": f"train-{rank}", "labels": {INDEX_KEY: str(rank)}},
        "spec": {"nodeName": node},
        "status": {"phase": phase, "containerStatuses": [{"name": "train", "state": state}], "conditions": []},
    }
    for key, value in extra.items():
        body[key].update(value)
    return body


def deleted_by_controller(body: dict[str, Any], asked: int, grace: int = 30) -> dict[str, Any]:
    """The last state a watch saw of a rank the controller deleted: a ``deletionTimestamp`` (when it
    was asked plus the grace period), its container still running."""
    body["metadata"].update(deletionTimestamp=at(asked + grace), deletionGracePeriodSeconds=grace)
    return body


def failed_job(seconds: int) -> dict[str, Any]:
    condition = {
        "type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit", "lastTransitionTime": at(seconds),
    }  # fmt: skip
    return {"metadata": {"name": "train"}, "status": {"conditions": [condition]}}


def end(pods: list[dict[str, Any]], gone: set[str], nodes: dict[str, bool | None], failed: int) -> tuple[Any, Any]:
    seen = JobPods()
    for body in pods:
        seen.record(body["metadata"]["name"], body, body["metadata"]["name"] in gone)
    ended = job_end(failed_job(failed), seen, lambda node: nodes.get(node or ""), "train")
    assert ended is not None
    return ended


@pytest.mark.parametrize(
    "node_of_the_deleted_peer",
    [False, None],  # cordoned (node_stays says "going"), and no `get nodes` permission (not known)
)
def test_a_bug_in_one_rank_is_not_a_preemption_because_the_controller_deleted_its_peer(
    node_of_the_deleted_peer: bool | None,
) -> None:
    """Rank 1 exits 1; the controller judges the Job and deletes rank 0, which sits on a cordoned node
    (or on a node nobody may read). The bug is the culprit: an application failure, not retried as a
    spot interruption."""
    rank0 = deleted_by_controller(pod(0, "node-a"), asked=5)
    rank1 = pod(1, "node-b", exit_code=1, finished=5)
    result, culprit = end([rank0, rank1], {"train-0"}, {"node-a": node_of_the_deleted_peer, "node-b": True}, 5)
    assert (result.outcome, result.exit_code, culprit["metadata"]["name"]) == (Outcome.APPLICATION, 1, "train-1")
    assert not result.interrupted


def test_a_rank_still_running_on_a_cordoned_node_is_not_preempted() -> None:
    """The Job is judged failed while rank 0 still runs on a cordoned node (not yet deleted): cordoning
    takes no capacity away."""
    result, culprit = end(
        [pod(0, "node-a"), pod(1, "node-b", exit_code=1, finished=5)], set(), {"node-a": False, "node-b": True}, 5
    )
    assert (result.outcome, culprit["metadata"]["name"]) == (Outcome.APPLICATION, "train-1")


def test_a_reclaim_still_explains_the_peer_that_lost_it() -> None:
    """Node shutdown: rank 1 is marked ``DisruptionTarget`` at 0 s and exits 143 at 10 s; rank 0 lost its
    peer and failed at 3 s. The reclaim began first: preempted, resubmitted."""
    disruption = {
        "type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
        "message": "Pod was terminated in response to imminent node shutdown.", "lastTransitionTime": T0,
    }  # fmt: skip
    rank1 = pod(1, "node-b", exit_code=143, finished=10)
    rank1["status"]["conditions"].append(disruption)
    result, culprit = end([pod(0, "node-a", exit_code=1, finished=3), rank1], set(), {"node-a": True}, 3)
    assert (result.outcome, culprit["metadata"]["name"]) == (Outcome.PREEMPTED, "train-1") and result.interrupted


def test_a_node_that_went_away_before_the_failure_is_the_culprit_only_when_it_could_be_read() -> None:
    """Rank 1 vanished with its node at 2 s (no condition was seen), rank 0 then lost its peer at 4 s.
    With the node known to be gone, the reclaim came first; with the node not readable (no RBAC), a
    guess never outranks the container's own exit."""
    rank1 = deleted_by_controller(pod(1, "node-b"), asked=2, grace=0)
    rank0 = pod(0, "node-a", exit_code=1, finished=4)
    known, _ = end([rank0, rank1], {"train-1"}, {"node-a": True, "node-b": False}, 4)
    unknown, culprit = end([rank0, rank1], {"train-1"}, {"node-a": True, "node-b": None}, 4)
    assert known.outcome is Outcome.PREEMPTED
    assert (unknown.outcome, culprit["metadata"]["name"]) == (Outcome.APPLICATION, "train-0")


def test_with_no_rank_reporting_its_end_the_inferred_one_still_decides() -> None:
    """Both ranks gone without a word, one of them with its node: as before, a reclaim."""
    rank0 = deleted_by_controller(pod(0, "node-a"), asked=2, grace=0)
    rank1 = deleted_by_controller(pod(1, "node-b"), asked=2, grace=0)
    result, _ = end([rank0, rank1], {"train-0", "train-1"}, {"node-a": True, "node-b": False}, 3)
    assert result.outcome is Outcome.PREEMPTED


def complete_job() -> dict[str, Any]:
    conditions = [
        {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": at(9)},
        {"type": "Complete", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": at(9)},
    ]
    return {"metadata": {"name": "train"}, "status": {"conditions": conditions, "succeeded": 2}}


def profiled_success(
    rank: int, node: str, signals: list[str], *, drained_at: int | None = None, result: bool | None = None
) -> dict[str, Any]:
    """A rank that exited 0, its base container's termination message holding the profiler's end line
    (``profiling.termination``: the result, then the end), kept by the end hold; ``drained_at``: a drain's
    eviction (``DisruptionTarget`` ``EvictionByEvictionAPI``, then the deletion) at that second. ``result``: the
    result line printed (default: by the main machine, rank 0, alone, as a training does)."""
    body = pod(rank, node, exit_code=0, finished=8)
    printed = rank == 0 if result is None else result
    end = {"exit_code": 0, "signals": signals, "spot_notice": None, "result": "kept" if printed else "none"}
    terminated = body["status"]["containerStatuses"][0]["state"]["terminated"]
    terminated.update(reason="Completed", message="::airflow-gpu-end::" + json.dumps(end))
    if drained_at is not None:
        body["status"]["conditions"].append({
            "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting", "lastTransitionTime": at(drained_at),
        })  # fmt: skip
        body["metadata"].update(deletionTimestamp=at(drained_at + 30), deletionGracePeriodSeconds=30)
    return body


def completed(*pods: dict[str, Any]) -> tuple[Any, Any]:
    seen = JobPods()
    seen.listed({body["metadata"]["name"]: body for body in pods})
    ended = job_end(complete_job(), seen, lambda node: True, "train")
    assert ended is not None
    return ended


def test_a_complete_job_is_a_success_read_from_its_main_machine() -> None:
    """Both ranks finished; rank 1 was drained after it had (no signal reached its workload): a success."""
    result, culprit = completed(
        profiled_success(0, "node-a", []), profiled_success(1, "node-b", [], drained_at=9)
    )  # fmt: skip
    assert (result.outcome, culprit["metadata"]["name"]) == (Outcome.SUCCEEDED, "train-0")


def test_a_complete_job_whose_main_machine_exited_0_on_a_drain_s_sigterm_is_an_interruption() -> None:
    """Rank 0 traps SIGTERM and exits 0 on the drain's, without its result line: the controller counts its index
    complete, and the Job ``Complete``, though the training stopped mid-way (the profiler's end lists the signal
    it passed on). As a single pod's run (``classify_pod``), an interruption to run again, not a success."""
    result, culprit = completed(
        profiled_success(1, "node-b", []), profiled_success(0, "node-a", ["SIGTERM"], drained_at=5, result=False)
    )  # fmt: skip
    assert culprit["metadata"]["name"] == "train-0"
    assert result.outcome is not Outcome.SUCCEEDED and result.interrupted and result.transient


def test_a_machine_stopped_once_the_main_one_finished_with_its_result_takes_nothing_from_the_training() -> None:
    """Rank 0 printed its result and exited 0 of its own accord; rank 1, at torch's exit barrier, was then
    drained and exited 0 on the SIGTERM (Job ``Complete``), or was reclaimed and failed (Job failed, as in the
    eighth soak, which ran the finished training again). Either way the training finished: a success, read
    from the main machine. Without the main machine's result line the stop stands."""
    main = profiled_success(0, "node-a", [])
    stopped = profiled_success(1, "node-b", ["SIGTERM"], drained_at=8)
    result, culprit = completed(main, stopped)
    assert (result.outcome, culprit["metadata"]["name"]) == (Outcome.SUCCEEDED, "train-0")

    reclaimed = pod(1, "node-b", exit_code=143, finished=9)
    reclaimed["status"]["conditions"].append({
        "type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
        "message": "Pod was terminated in response to imminent node shutdown.", "lastTransitionTime": at(8),
    })  # fmt: skip
    result, culprit = end([main, reclaimed], set(), {"node-a": True, "node-b": True}, 9)
    assert (result.outcome, culprit["metadata"]["name"]) == (Outcome.SUCCEEDED, "train-0")
    assert "machine train-1 then ended" in result.message

    silent = profiled_success(0, "node-a", [], result=False)  # exited 0 with no result line: not known finished
    result, culprit = end([silent, reclaimed], set(), {"node-a": True, "node-b": True}, 9)
    assert result.outcome is Outcome.PREEMPTED and culprit["metadata"]["name"] == "train-1"


def test_a_machine_stopped_while_the_main_one_gave_no_result_is_an_interruption() -> None:
    """Without the main machine's result line nothing says the training finished: rank 1's exit 0 on a drain's
    SIGTERM is the stop it is, the Job ``Complete`` or not. Nor is a main machine that got a stop signal itself
    finished, even where no deletion or disruption shows on its pod (a runtime's own SIGTERM)."""
    silent = profiled_success(0, "node-a", [], result=False)
    result, culprit = completed(silent, profiled_success(1, "node-b", ["SIGTERM"], drained_at=5))
    assert culprit["metadata"]["name"] == "train-1" and result.interrupted

    signalled = profiled_success(0, "node-a", ["SIGTERM"])  # no deletionTimestamp, no DisruptionTarget
    assert not finished_with_result(signalled)
    assert finished_with_result(profiled_success(0, "node-a", []))


def test_another_machine_s_failure_once_the_main_one_finished_with_its_result_is_no_failure_of_the_training() -> None:
    """The tenth soak: after the last epoch rank 1's process aborted ("terminate called without an active
    exception", SIGABRT) as its process group was torn down, its launcher exited 1, and the training failed as an
    application error, with rank 0's result printed. Rank 0 cannot print its result while a peer it needs is
    failing (its next collective fails or hangs), so rank 1 failed past the last collective: a success, with a
    word. Without the main machine's result the failure stands."""
    failed = pod(1, "node-b", exit_code=1, finished=9)
    result, culprit = end([profiled_success(0, "node-a", []), failed], set(), {"node-a": True, "node-b": True}, 9)
    assert (result.outcome, culprit["metadata"]["name"]) == (Outcome.SUCCEEDED, "train-0")
    assert "machine train-1 then ended" in result.message
    silent = profiled_success(0, "node-a", [], result=False)
    result, culprit = end([silent, failed], set(), {"node-a": True, "node-b": True}, 9)
    assert (result.outcome, culprit["metadata"]["name"]) == (Outcome.APPLICATION, "train-1")


def judged_job(kind: str, reason: str, message: str) -> dict[str, Any]:
    condition = {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": at(9)}
    return {"metadata": {"name": "train"}, "status": {"conditions": [condition]}}


def judged_end(job: dict[str, Any], main: dict[str, Any], other: dict[str, Any], gone: bool) -> Any:
    """``job_end`` of a two-machine Job as the pods were last read: the main machine, and machine 1 (``gone``:
    no longer listed)."""
    seen = JobPods()
    seen.record("train-0", main, False)
    seen.record("train-1", other, gone)
    ended = job_end(job, seen, lambda node: True, "train")
    assert ended is not None
    return ended


def test_a_failed_job_no_pod_explains_once_the_main_machine_finished_with_its_result_is_a_success() -> None:
    """The slice beside the suite: the main machine printed its result and exited 0, and the Job was ``Failed``
    (``BackoffLimitExceeded``) while the pods as read told nothing: machine 1 last seen terminating, its deletion
    asked without a condition, on a node that stays (a listing behind the Job, or a cluster that marks the Job
    failed before its ranks end). The training had finished all the same, but the try failed as "not
    recognised" and the retry trained again. Without the main machine's result it stays unknown."""
    job = judged_job("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")

    def judge(main: dict[str, Any]) -> Any:  # machine 1: terminating, no word why
        return judged_end(job, main, deleted_by_controller(pod(1, "node-b"), asked=8), gone=False)

    result, culprit = judge(profiled_success(0, "node-a", []))
    assert (result.outcome, culprit["metadata"]["name"]) == (Outcome.SUCCEEDED, "train-0")
    assert result.message.startswith(
        "the main machine finished with its result; Job train failed (BackoffLimitExceeded"
    )
    result, culprit = judge(profiled_success(0, "node-a", [], result=False))
    assert result.outcome is Outcome.UNKNOWN and culprit is None
    # judged but not final yet (``FailureTarget``): nothing left to wait for once the main machine finished
    target = judged_job("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    terminating = deleted_by_controller(pod(1, "node-b"), asked=8)
    result, _ = judged_end(target, profiled_success(0, "node-a", []), terminating, gone=False)
    assert result.outcome is Outcome.SUCCEEDED


def test_a_job_past_its_deadline_once_the_main_machine_finished_with_its_result_is_a_success() -> None:
    """``activeDeadlineSeconds`` ran out while machine 1 lingered at torch's exit barrier, after the main machine
    had printed its result and exited 0: the controller deleted the lingering rank and failed the Job
    (``DeadlineExceeded``). The training had finished; a run again would train anew. A main machine the deadline
    stopped (its SIGTERM in the profiler's end) or without its result leaves the deadline's failure standing."""
    job = judged_job("FailureTarget", "DeadlineExceeded", "Job was active longer than specified deadline")

    def judge(main: dict[str, Any]) -> Any:  # machine 1: deleted by the controller, gone
        return judged_end(job, main, deleted_by_controller(pod(1, "node-b"), asked=9), gone=True)

    result, culprit = judge(profiled_success(0, "node-a", []))
    assert (result.outcome, culprit["metadata"]["name"]) == (Outcome.SUCCEEDED, "train-0")
    assert "ran past its deadline: Job was active longer than specified deadline" in result.message
    for main in (profiled_success(0, "node-a", ["SIGTERM"]), profiled_success(0, "node-a", [], result=False)):
        result, culprit = judge(main)
        assert (result.outcome, result.reason, culprit) == (Outcome.UNKNOWN, "DeadlineExceeded", None)


def evicted(body: dict[str, Any], seconds: int, grace: int = 30) -> dict[str, Any]:
    """A drain's eviction at ``seconds``: ``DisruptionTarget`` (``EvictionByEvictionAPI``) and the deletion."""
    body["status"]["conditions"].append({
        "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting", "lastTransitionTime": at(seconds),
    })  # fmt: skip
    body["metadata"].update(deletionTimestamp=at(seconds + grace), deletionGracePeriodSeconds=grace)
    return body


def test_a_drained_job_waits_for_its_main_machine_which_may_still_finish_with_its_result() -> None:
    """The sixteenth soak: a drain (its nodes cordoned) evicted both machines in the training's last step.
    Machine 1 exited 143 on the SIGTERM and the controller judged the Job while the main machine, terminating,
    had not ended; the trigger took the eviction for the Job's end and trained again, though the main machine
    printed its result and exited 0 30 ms later. Its end is now waited for until its kill deadline (the
    eviction's ``deletionTimestamp``) and a little more, on a cordoned node too: a finished training then, an
    eviction as before if it ends stopped or shows no end in time. The same on a cluster before Kubernetes 1.31,
    which sets ``Failed`` at once rather than ``FailureTarget`` first."""
    machine1 = evicted(pod(1, "node-b", exit_code=143, finished=8), 8)

    def judge(main: dict[str, Any], now: int, job: dict[str, Any] | None = None, gone: bool = False) -> Any:
        seen = JobPods()
        seen.record("train-0", main, gone)
        seen.record("train-1", machine1, False)
        cordoned = {"node-a": False, "node-b": False}  # node_stays: a drained node is "going"
        return job_end(job or failed_job(9), seen, lambda node: cordoned.get(node or ""), "train", now=stamp(now))

    terminating = evicted(pod(0, "node-a"), 8)  # deletionTimestamp at 38 s
    before_1_31 = judged_job("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    for job in (failed_job(9), before_1_31):
        assert judge(terminating, now=10, job=job) is None  # in its grace period: its end is on its way
        assert judge(terminating, now=38 + 14, job=job) is None  # the kubelet's kill, and its word, may lag
        result, _ = judge(terminating, now=38 + 16, job=job)  # no end shown: judged without it, as before
        assert result.outcome is Outcome.EVICTED and result.interrupted
    finished = profiled_success(0, "node-a", [], drained_at=8)
    result, culprit = judge(finished, now=11)
    assert (result.outcome, culprit["metadata"]["name"]) == (Outcome.SUCCEEDED, "train-0")
    stopped = profiled_success(0, "node-a", ["SIGTERM"], drained_at=8, result=False)
    result, _ = judge(stopped, now=11)
    assert result.outcome is Outcome.EVICTED and result.interrupted
    assert judge(terminating, now=10, gone=True) is not None  # a main machine the API no longer has: no end


def test_the_wait_for_the_main_machine_is_bounded_by_its_grace_period_or_its_kill_deadline() -> None:
    """A main machine not deleted yet when the Job was judged (the controller deletes it next) is waited for its
    ``terminationGracePeriodSeconds`` from the judgement (30 s when its spec as read does not say); a deleted one
    until its kill deadline (``deletionTimestamp``), earlier or later than that. Without a time to count from, not
    at all."""
    failed = pod(1, "node-b", exit_code=1, finished=9)

    def judge(main: dict[str, Any], now: int, job: dict[str, Any] | None = None) -> Any:
        seen = JobPods()
        seen.record("train-0", main, False)
        seen.record("train-1", failed, False)
        return job_end(failed_job(9) if job is None else job, seen, lambda node: True, "train", now=stamp(now))

    short = pod(0, "node-a", spec={"terminationGracePeriodSeconds": 5})
    assert judge(short, now=9 + 5 + 14) is None
    assert judge(short, now=9 + 5 + 16)[0].outcome is Outcome.APPLICATION
    unsaid = pod(0, "node-a")  # no terminationGracePeriodSeconds in the pod as read: the API's default, 30 s
    assert judge(unsaid, now=9 + 30 + 14) is None and judge(unsaid, now=9 + 30 + 16) is not None
    late = deleted_by_controller(pod(0, "node-a", spec={"terminationGracePeriodSeconds": 5}), asked=9, grace=120)
    assert judge(late, now=9 + 120 + 14) is None and judge(late, now=9 + 120 + 16) is not None
    drained = evicted(pod(0, "node-a", spec={"terminationGracePeriodSeconds": 3600}), 8, grace=10)  # --grace-period
    assert judge(drained, now=18 + 14) is None and judge(drained, now=18 + 16) is not None  # the kill, not the spec
    untimed = failed_job(9)
    del untimed["status"]["conditions"][0]["lastTransitionTime"]
    assert judge(pod(0, "node-a"), now=10, job=untimed) is not None  # nothing to count from: judged at once
