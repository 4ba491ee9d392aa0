"""A pod gone before its end was read is a success only on the profiler's word (``followed_clean_exit``).

The lines are handed to ``RetryingPodManager._log_message`` as KPO's log follower hands them, from a
report the profiler's own ``marker.render`` writes; the manager's Kubernetes client is never called
(None): a fake at the boundary this project owns.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_gpu.operators.kubernetes_reads import RetryingPodManager
from airflow_gpu.profiling import marker

RESULT = '::airflow-gpu-result::{"loss": 0.5}'


def report(**fields: Any) -> list[str]:
    payload = {"v": marker.VERSION, "source": "none", "note": None, "interval": 1.0, "started": 0.0, "ended": 1.0,
               "exit_code": 0, "signals": [], "spot_notice": None, "gpus": [], **fields}  # fmt: skip
    return marker.render(payload, [])


def followed(*lines: str) -> RetryingPodManager:
    manager = RetryingPodManager(kube_client=None)
    manager._log_message("\n".join(lines), "base", False, None)  # KPO's call: no prefix, no formatter
    return manager


def test_a_report_of_a_clean_exit_is_a_success() -> None:
    manager = followed("training", RESULT, *report())
    assert manager.followed_clean_exit("base")
    assert manager.followed_output("base").result == {"loss": 0.5}
    assert manager.followed_output("base").profile is not None
    assert not manager.followed_clean_exit("sidecar")  # another container's log says nothing of this one


@pytest.mark.parametrize(
    "fields",
    [
        {"exit_code": 3},  # the workload failed
        {"signals": ["SIGTERM"]},  # a deletion or drain reached it, even if it exited 0 on it
        {"spot_notice": "2026-11-27T02:00:00Z"},  # the node was being reclaimed
    ],
)
def test_a_report_of_anything_else_is_not(fields: dict[str, Any]) -> None:
    assert not followed(RESULT, *report(**fields)).followed_clean_exit("base")


def test_no_report_or_a_cut_one_tells_nothing() -> None:
    """Unprofiled (no report), or a report whose last chunk never came (the stream cut): nothing is known."""
    lines = report(note="x" * 2 * marker.CHUNK_CHARS)  # a report of several chunks
    assert len(lines) > 1
    assert not followed(RESULT).followed_clean_exit("base")
    assert not followed(RESULT, *lines[:-1]).followed_clean_exit("base")


def test_a_report_followed_by_more_of_the_log_is_not_the_end() -> None:
    """A report the workload printed (a nested profiled command, an echoed log) and then more output, with no
    report at the end (the pod killed, the node lost): nothing is known, as the strict reader says of the
    whole log."""
    assert not followed(*report(), "epoch 2", "epoch 3").followed_clean_exit("base")
    assert not followed(*report(), RESULT).followed_clean_exit("base")
    assert followed("epoch 1", RESULT, *report(), "").followed_clean_exit("base")  # blank lines after it are fine


def test_a_report_the_workload_printed_before_the_real_one_does_not_count() -> None:
    """The reader takes one complete run at the very end only: a fake clean report the workload printed, then
    the wrapper's own of its failure, is no success (and two runs at the end are none: nothing is known)."""
    assert not followed(*report(), RESULT, *report(exit_code=1)).followed_clean_exit("base")
    manager = followed(RESULT, *report())
    assert manager.followed_clean_exit("base")
    manager.forget()  # the next pod's log starts empty
    assert not manager.followed_clean_exit("base")


def ended(message: str | None, container: str = "base", name: str = "p") -> dict[str, Any]:
    terminated: dict[str, Any] = {"exitCode": 0, "reason": "Completed"}
    if message is not None:
        terminated["message"] = message
    return {"metadata": {"name": name, "namespace": "default"},
            "status": {"phase": "Succeeded", "containerStatuses": [{"name": container,
                                                                   "state": {"terminated": terminated}}]}}  # fmt: skip


def test_a_termination_message_stands_in_for_a_log_cut_before_its_result() -> None:
    """The follow ended before the result line (the stream cut, the node gone); the pod read afterwards holds
    the profiler's termination message (``profiling.termination``): its result line and its clean end."""
    manager = followed("training")
    manager.saw(
        ended(f'{RESULT}\n::airflow-gpu-end::{{"exit_code": 0, "signals": [], "spot_notice": null, "result": "kept"}}')
    )
    assert manager.followed_output("base").result == {"loss": 0.5}
    assert manager.followed_clean_exit("base")
    assert not manager.followed_clean_exit("sidecar")


def test_the_profiler_s_last_result_outranks_a_follow_cut_short_and_a_signalled_end_is_no_clean_exit() -> None:
    """The follow ended after an earlier result line (the stream cut with the node); the message holds the last."""
    manager = followed('::airflow-gpu-result::{"loss": 0.4}')
    signalled = '{"exit_code": 0, "signals": ["SIGTERM"], "spot_notice": null, "result": "kept"}'
    manager.saw(ended(f"{RESULT}\n::airflow-gpu-end::{signalled}"))
    assert manager.followed_output("base").result == {"loss": 0.5}
    assert not manager.followed_clean_exit("base")
    too_long = followed('::airflow-gpu-result::{"loss": 0.4}')  # the last was too long for the message: the log's
    too_long.saw(ended('::airflow-gpu-end::{"exit_code": 0, "signals": [], "spot_notice": null, "result": "too long"}'))
    assert too_long.followed_output("base").result == {"loss": 0.4} and too_long.followed_clean_exit("base")


def test_a_failed_container_s_message_is_not_the_profiler_s() -> None:
    """With ``FallbackToLogsOnError`` a failed container's message is its log's tail, where the workload could
    print anything, an end line included: the profiler writes only on exit 0, so only such a message counts."""
    manager = followed("training")
    pod = ended(
        f'{RESULT}\n::airflow-gpu-end::{{"exit_code": 0, "signals": [], "spot_notice": null, "result": "kept"}}'
    )
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 1
    manager.saw(pod)
    assert not manager.followed_output("base").result_found and not manager.followed_clean_exit("base")


def test_a_message_the_profiler_did_not_end_says_nothing() -> None:
    manager = followed("training")
    manager.saw(ended(RESULT))  # the workload's own message, no end line: not the entrypoint's
    assert not manager.followed_output("base").result_found
    assert not manager.followed_clean_exit("base")


class RefusingPatches:
    """A ``CoreV1Api`` whose Role has no ``patch`` on pods (a fake at the boundary the manager calls through)."""

    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> None:
        self.deleted.append(name)

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any, **kwargs: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        raise ApiException(status=403, reason="Forbidden")


def test_a_release_that_is_refused_never_costs_the_delete(capfd: pytest.CaptureFixture[str]) -> None:
    """The provider's finalizer is removed after the delete (``utils.end_hold``): an older Role without ``patch``
    on pods loses the hold, never the delete of a running GPU pod."""
    from kubernetes.client import models as k8s

    client = RefusingPatches()
    manager = RetryingPodManager(kube_client=client)
    pod = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="train", namespace="gpu", finalizers=["airflow-gpu/end-unread"]))
    manager.delete_pod(pod)
    assert client.deleted == ["train"]
    said = capfd.readouterr()
    assert "Could not release pod gpu/train (ApiException" in said.out + said.err
