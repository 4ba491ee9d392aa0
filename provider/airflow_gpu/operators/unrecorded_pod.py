"""A pod whose success its try read but could not record: the pod is kept as the record, for the retry.

``success_mark`` records a read success in the task state store before KPO's cleanup deletes the pod.
The record's write goes through Airflow's supervisor; when it fails (the supervisor being killed, the
api-server answering errors past the retries) and the pod went anyway, a retry after the worker's
death found neither and ran the workload again (the twenty-fourth soak, shard 44: the write failed on
the dying supervisor's closed pipe a moment before the try could see itself orphaned, since the
kernel closes a killed process's files before it hands its children to init). So the pod stays:
not deleted, not labelled checked, held by the provider's finalizer, with the reading try's clearing
in ``READ_ANNOTATION``. A retry takes it over as a success no try read (``kubernetes_takeover``); a
Clear's try does not, and sets it aside (``set_aside``) before KPO's reattach would read it.

A try that lives on asks for the record again once it is about to succeed (``record_kept``), and
cleans the pod up as KPO would have once it is written. Nothing is kept when no retry would take the
pod over (``retry_rule.why_no_takeover``: the last try, reattach off, a retry policy): KPO's cleanup
runs as before.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

from airflow_gpu.operators import orphaned_try
from airflow_gpu.operators.retry_rule import why_no_takeover
from airflow_gpu.operators.success_mark import READ_ANNOTATION, clearing, read_in_another_clearing, record
from airflow_gpu.spot.classifier import Outcome
from airflow_gpu.utils import end_hold
from airflow_gpu.utils.api_retry import call

if TYPE_CHECKING:
    from airflow.sdk import Context
    from kubernetes.client import models as k8s

#: The ``on_finish_action`` values under which KPO keeps a succeeded pod (it labels it checked instead).
KEEPING = ("keep_pod", "delete_active_pod")


def record_pod(op: Any, context: Context | None) -> bool:
    """Record the success of ``op``'s pod, which its cleanup judged; False when the pod must stay as the record
    (``keep``), True when the record was written or nothing was to be (no success, a sidecar's result, a result
    line that is not JSON, no context) or no retry would take the pod over."""
    if context is None or op.do_xcom_push or op._result_error is not None or op.pod is None:
        return True
    if op._outcome is None or op._outcome.outcome is not Outcome.SUCCEEDED:
        return True
    try:
        record(context, op.pod.metadata.name, op._logged_result, op.spot_run.to_json())
    except Exception as error:
        why_not = why_no_takeover(op, context)
        _log(op).warning("Could not record the success of pod %s in the task state store (%s); %s",
                         op.pod.metadata.name, error,
                         f"it is cleaned up all the same: {why_not}" if why_not else "it is kept for a retry to "
                         "take over")  # fmt: skip
        return why_not is not None
    return True


def keep(op: Any, pod: k8s.V1Pod, context: Context | None) -> None:
    """Leave ``pod`` as the record: unmarked and held, with the reading try's clearing on it."""
    op._kept_unrecorded = pod
    if context is None:
        return
    name, namespace = pod.metadata.name, pod.metadata.namespace
    value = json.dumps({"try_number": int(context["ti"].try_number), **clearing(context)})
    patch = {"metadata": {"annotations": {READ_ANNOTATION: value}}}
    try:
        call(lambda: op.client.patch_namespaced_pod(name, namespace, patch), f"marking pod {name} as read",
             log=_log(op))  # fmt: skip
    except Exception as error:  # unmarked, a Clear's try would take it over too: told, not fatal
        _log(op).warning("Could not mark pod %s as read by this try (%s)", name, error)


def record_kept(op: Any, context: Context) -> None:
    """The try lives on to its success after its cleanup kept the pod: the record is asked again, and once it
    is written the pod is cleaned up as KPO's cleanup would have (labelled checked where the pod is kept,
    deleted or let go of). A record that fails again leaves the pod as the record."""
    pod = getattr(op, "_kept_unrecorded", None)
    op._kept_unrecorded = None
    if pod is None or orphaned_try.orphaned(op):
        return
    try:
        record(context, pod.metadata.name, op._logged_result, op.spot_run.to_json())
    except Exception as error:
        op.log.warning("Could not record the success of pod %s again (%s); it stays for a retry to take over",
                       pod.metadata.name, error)  # fmt: skip
        return
    if op.on_finish_action in KEEPING:
        op.patch_already_checked(pod, reraise=False)
    op.process_pod_deletion(pod, reraise=False)  # deleted, or kept as asked and let go of (``kubernetes_release``)


def set_aside(op: Any, pod: k8s.V1Pod, context: Context | None) -> bool:
    """A kept pod that KPO's reattach found for a Clear's try (its clearing is not this one's): labelled checked
    and let go of, deleted unless the user keeps pods; True when it was, and KPO is to create the next pod."""
    if not read_in_another_clearing(context, pod.metadata.annotations):
        return False
    op.patch_already_checked(pod, reraise=False)  # a reattach never finds it again, whatever is kept
    if op.on_finish_action in KEEPING:
        end_hold.release_quietly(op.client, pod.metadata.name, pod.metadata.namespace, op.log)
    else:
        with contextlib.suppress(Exception):  # a delete that fails leaves the hold to ``airflow-gpu reap``
            op.pod_manager.delete_pod(pod)  # and let go of (``RetryingPodManager.delete_pod``)
    op.log.info("Pod %s holds a success read before the task was cleared: a new pod runs the workload",
                pod.metadata.name)  # fmt: skip
    return True


def _log(op: Any) -> Any:
    """The try's log, or nothing for an orphan, whose log lines fail on the broken pipe."""
    return orphaned_try.SILENT if orphaned_try.orphaned(op) else op.log
