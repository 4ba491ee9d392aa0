"""``PodReplacement``: the spot run a trigger carries on (pure: no cluster, no Airflow)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_gpu.spot.classifier import Classification, Outcome
from airflow_gpu.spot.policy import SpotPolicy
from airflow_gpu.spot.run import SpotRun
from airflow_gpu.triggers.pod_replacement import NAME_TOKEN, PodReplacement, same_task_try
from airflow_gpu.utils.manifest_delta import delta

LABELS = {"dag_id": "d", "task_id": "t", "run_id": "r", "try_number": "1", "airflow-gpu/accelerator": "l4"}


def pod(capacity: str) -> dict[str, Any]:
    notice = f"/tmp/airflow-gpu/{NAME_TOKEN}/spot-notice"
    return {
        "metadata": {"name": NAME_TOKEN, "labels": {**LABELS, "airflow-gpu/capacity": capacity},
                     "annotations": {"airflow-gpu/state": "{}"}, "uid": "old", "resourceVersion": "9"},
        "spec": {"containers": [{"name": "base", "image": "cuda", "env": [
            {"name": "AIRFLOW_GPU_SPOT_NOTICE", "value": notice}, {"name": "AIRFLOW_GPU_ATTEMPT", "value": "1"}],
            "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", f"date > {notice}"]}}}}]},
    }  # fmt: skip


def argument(first_name: str = "train-abc12345", **policy: Any) -> dict[str, Any]:
    spot_policy = SpotPolicy(**policy)
    run = SpotRun.start(spot_policy, ["L4:1"], "kubernetes", "spot")
    base = pod("spot")
    return {
        "policy": spot_policy.model_dump(), "candidates": ["L4:1"], "requested_capacity": "spot",
        "state": run.to_json(), "base": base, "base_key": "0/spot",
        "deltas": {"0/on-demand": delta(base, pod("on-demand"))}, "first_name": first_name,
    }  # fmt: skip


PREEMPTED = Classification(Outcome.PREEMPTED, "TerminationByKubelet", "node shutdown", transient=True)


def test_each_interruption_is_counted_once_however_often_the_trigger_replays_it() -> None:
    replacement = PodReplacement.from_argument(argument(max_interruptions=1), "base", "delete_pod")
    first = replacement.decide("train-abc12345", PREEMPTED, "gpu-spot-1")
    assert first.action == "resubmit" and replacement.next_name() == "train-abc12345-r1"
    # A restarted trigger starts from its arguments again and meets the same pod: the same record.
    replay = PodReplacement.from_argument(argument(max_interruptions=1), "base", "delete_pod")
    replay.decide("train-abc12345", PREEMPTED, "gpu-spot-1")

    def untimed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "time"} for r in records]

    assert untimed(replay.run.interruptions) == untimed(replacement.run.interruptions)
    assert len(replay.run.interruptions) == 1 and replay.next_name() == replacement.next_name()
    # The second reclaim is past the budget: on-demand, with the name that follows.
    second = replacement.decide("train-abc12345-r1", PREEMPTED, "gpu-spot-2")
    assert second.action == "resubmit" and replacement.run.capacity == "on-demand"
    assert replacement.next_name() == "train-abc12345-r2"
    manifest = replacement.manifest(replacement.next_name())
    assert manifest["metadata"]["labels"]["airflow-gpu/capacity"] == "on-demand"
    assert "uid" not in manifest["metadata"] and "resourceVersion" not in manifest["metadata"]
    text = json.dumps(manifest)
    assert NAME_TOKEN not in text and "/tmp/airflow-gpu/train-abc12345-r2/spot-notice" in text
    env = {e["name"]: e["value"] for e in manifest["spec"]["containers"][0]["env"]}
    assert env["AIRFLOW_GPU_ATTEMPT"] == "3" and env["AIRFLOW_GPU_INTERRUPTIONS"] == "2"
    assert env["AIRFLOW_GPU_CAPACITY"] == "on-demand"
    state = json.loads(manifest["metadata"]["annotations"]["airflow-gpu/state"])
    assert state["submissions"] == 2 and len(state["interruptions"]) == 2


def test_an_interruption_is_stamped_with_when_the_pod_ended_not_when_it_was_replayed() -> None:
    """The pod's last state tells when it ended: its container's ``finishedAt`` (a graceful node
    shutdown), else the ``deletionTimestamp`` of a pod that vanished with its node."""
    stopped = {
        "metadata": {"name": "train-abc12345", "deletionTimestamp": "2026-01-01T00:05:00Z"},
        "status": {"containerStatuses": [{"name": "base", "state": {"terminated": {
            "exitCode": 143, "startedAt": "2025-12-31T23:00:00Z", "finishedAt": "2026-01-01T00:00:30Z",
        }}}]},
    }  # fmt: skip
    vanished = {"metadata": {"name": "train-abc12345-r1", "deletionTimestamp": "2026-01-01T01:00:00Z"}}
    replacement = PodReplacement.from_argument(argument(max_interruptions=2), "base", "delete_pod")
    replacement.decide("train-abc12345", PREEMPTED, "gpu-spot-1", stopped)
    replacement.decide("train-abc12345-r1", PREEMPTED, "gpu-spot-2", vanished)
    assert [i["time"] for i in replacement.run.interruptions] == [
        "2026-01-01T00:00:30+00:00", "2026-01-01T01:00:00+00:00",
    ]  # fmt: skip


def test_a_bug_or_a_success_is_not_the_triggers_to_act_on() -> None:
    replacement = PodReplacement.from_argument(argument(), "base", "delete_pod")
    assert not replacement.replaceable(Classification(Outcome.APPLICATION, "Error", "exit 3", exit_code=3))
    assert not replacement.replaceable(Classification(Outcome.SUCCEEDED, "Succeeded"))
    assert replacement.replaceable(PREEMPTED)
    assert replacement.replaceable(Classification(Outcome.UNSCHEDULABLE, "Unschedulable", "0/4 nodes"))


def test_names_stay_valid_and_a_pod_of_another_try_is_never_adopted() -> None:
    replacement = PodReplacement.from_argument(argument(first_name="x" * 63), "base", "keep_pod")
    replacement.decide("x" * 63, PREEMPTED, None)
    name = replacement.next_name()
    assert len(name) <= 63 and name.endswith("-r1") and not replacement.delete_ended
    mine = replacement.manifest(name)
    assert same_task_try(json.loads(json.dumps(mine)), mine) is None
    other = json.loads(json.dumps(mine))
    other["metadata"]["labels"]["try_number"] = "2"
    assert same_task_try(other, mine) == "its label try_number='2' is not '1'"


def test_an_unusable_state_is_refused_with_the_reason() -> None:
    broken = {**argument(), "state": {"version": 999}}
    with pytest.raises(ValueError, match="state version 999"):
        PodReplacement.from_argument(broken, "base", "delete_pod")


def test_a_pod_never_seen_and_not_seen_deleted_is_no_interruption() -> None:
    """The official trigger's execution-deadline fast path fires before any state is seen: nothing says the
    pod was reclaimed, so nothing is replaced (``classify_pod(None)`` would say "PodDeleted")."""
    replacement = PodReplacement.from_argument(argument(), "base", "delete_pod")
    result = replacement.classify(None, deleted=False, node_stays=None)
    assert result.outcome is Outcome.UNKNOWN and not replacement.replaceable(result)
    assert replacement.classify(None, deleted=True, node_stays=None).outcome is Outcome.PREEMPTED


def test_a_pod_whose_workload_exited_0_before_a_drain_is_never_replaced() -> None:
    """Issue 26: the watch's last state of a drained pod shows its base container ended with exit 0 before the
    Eviction API's ``DisruptionTarget`` (a sidecar kept the pod Running; the drain then failed or deleted it):
    a success, whether the pod is gone or left ``Failed``. The same pod with its exit after the condition (the
    drain's SIGTERM) is an interruption the trigger replaces."""
    replacement = PodReplacement.from_argument(argument(), "base", "delete_pod")
    drained = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
               "message": "Eviction API: evicting", "lastTransitionTime": "2026-01-01T10:00:10Z"}  # fmt: skip

    def seen(phase: str, finished: str) -> dict[str, Any]:
        ended = {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": finished}}
        status = {"phase": phase, "conditions": [drained], "containerStatuses": [{"name": "base", "state": ended}]}
        return {"metadata": {"name": "train-abc12345"}, "spec": {"nodeName": "n"}, "status": status}

    for phase, deleted in (("Running", True), ("Failed", False)):
        result = replacement.classify(seen(phase, "2026-01-01T10:00:02Z"), deleted=deleted, node_stays=False)
        assert result.outcome is Outcome.SUCCEEDED and not replacement.replaceable(result), (phase, result)
        late = replacement.classify(seen(phase, "2026-01-01T10:00:11Z"), deleted=deleted, node_stays=False)
        assert replacement.replaceable(late), (phase, late)


def test_a_pod_whose_workload_exited_0_on_an_undated_node_shutdown_is_replaced() -> None:
    """A kubelet before 1.26 ends a pod on a graceful node shutdown with phase Failed, reason ``Terminated`` and
    no ``DisruptionTarget``: a base container that exited 0 on that SIGTERM (a checkpoint-and-exit loop) was
    reclaimed, and the trigger replaces the pod, whether the watch saw it left or deleted by PodGC after."""
    replacement = PodReplacement.from_argument(argument(), "base", "delete_pod")
    ended = {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": "2026-01-01T10:00:11Z"}}
    status = {"phase": "Failed", "reason": "Terminated",
              "message": "Pod was terminated in response to imminent node shutdown.",
              "containerStatuses": [{"name": "base", "state": ended}]}  # fmt: skip
    seen = {"metadata": {"name": "train-abc12345"}, "spec": {"nodeName": "n"}, "status": status}
    for deleted in (False, True):
        result = replacement.classify(seen, deleted=deleted, node_stays=False)
        assert result.outcome is Outcome.PREEMPTED and replacement.replaceable(result), (deleted, result)
