"""A new try takes over an earlier try's succeeded pod whose end no try read, instead of running it again.

A deferrable task's trigger fires (the pod succeeded) and its resume is lost: the Celery message
gone with a Redis restart, then the worker killed. The scheduler fails that try and the retry
starts ``execute`` from the beginning, without the trigger's event. KPO's reattach
(``get_or_create_pod``) then finds the ended pod, deletes it and creates another: hours of GPU
training run twice. A sync try whose worker died between its pod's success and its read leaves
the same pod behind.

A try that did read its pod's end left a mark on it: KPO's ``cleanup`` deletes a succeeded pod,
or labels it ``already_checked`` when it keeps it (``on_finish_action="keep_pod"`` or
``"delete_active_pod"``), and labels every pod that did not succeed. So a pod of this task
instance made by an earlier try that is Succeeded, not labelled and not being deleted holds a
result nobody consumed. The new try reads it as the lost resume would have
(``trigger_reentry``: the pod's log, its result line and GPU profile, the run's state from its
``airflow-gpu/state`` annotation, the end-of-pod cleanup as ``on_finish_action`` says) and
succeeds without creating a pod. Clearing a task whose try succeeded therefore runs it again: that
try deleted or labelled its pod.

Nothing is taken over
* with ``reattach_on_restart`` (``durable``) off: the user asked each try for a pod of its own,
  KPO's rule for running pods too;
* with ``do_xcom_push``: the result is in KPO's sidecar, which keeps the pod Running until a try
  reads it (the retry reattaches to a running pod, KPO's way); a Succeeded one had its sidecar
  read and stopped by a try that then died, and its result went with that try;
* from a pod that failed, or any other pod than an earlier try's of this task instance: the
  identity is the one a reattach checks (``utils.pod_identity``: dag, task, run and map index
  labels, the uid the task state store recorded for that name), with a try number below this one.
* from a pod an earlier try read and kept because it could not record the success
  (``unrecorded_pod``) when a Clear came since: its ``READ_ANNOTATION`` holds that try's
  clearing, and a Clear asks for a new run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.operators.pod import POD_IDENTIFIER_STATE_KEY

from airflow_gpu.operators.pod_marks import CHECKED_LABEL, submissions
from airflow_gpu.operators.success_mark import read_in_another_clearing
from airflow_gpu.operators.unrecorded_pod import set_aside
from airflow_gpu.spot.classifier import ended_on_a_deletion_signal
from airflow_gpu.utils.api_retry import call
from airflow_gpu.utils.end_hold import held
from airflow_gpu.utils.kubernetes import to_dict
from airflow_gpu.utils.pod_identity import identity_mismatch

if TYPE_CHECKING:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    from airflow.sdk import Context
    from kubernetes.client import models as k8s


def succeeded_unread(op: KubernetesPodOperator, context: Context) -> k8s.V1Pod | None:
    """The earlier try's pod of this task instance that succeeded and that no try read; None when there is none
    (or nothing may be taken over: see the module's docstring)."""
    if not op.reattach_on_restart or op.do_xcom_push:
        return None
    namespace = op.namespace or op.hook.get_namespace() or "default"
    selector = op._build_find_pod_label_selector(context)  # KPO's search: this task instance, not checked
    pods: list[k8s.V1Pod] = call(lambda: op.client.list_namespaced_pod(namespace, label_selector=selector).items,
                                 f"listing the pods of task {op.task_id}", log=op.log)  # fmt: skip
    try_number = int(context["ti"].try_number)
    store = context.get("task_state_store")
    stored = store.get(POD_IDENTIFIER_STATE_KEY) if store is not None else None
    expected = op._get_ti_pod_labels(context, include_try_number=False)
    found = []
    for pod in pods:
        labels = pod.metadata.labels or {}
        recorded = stored.get("uid") if isinstance(stored, dict) and stored.get("name") == pod.metadata.name else None
        mismatch = identity_mismatch(labels, pod.metadata.uid, expected=expected, try_number=try_number,
                                     recorded_uid=str(recorded) if recorded else None)  # fmt: skip
        cleared = read_in_another_clearing(context, pod.metadata.annotations)  # kept unrecorded, then a Clear
        if mismatch is None and unread_success(pod) and _earlier(labels.get("try_number"), try_number) and not cleared:
            found.append(pod)
    return max(found, key=lambda pod: (int(pod.metadata.labels["try_number"]), submissions(pod.metadata.annotations)),
               default=None)  # fmt: skip


def unread_success(pod: k8s.V1Pod) -> bool:
    """Succeeded, and neither labelled checked nor being deleted: no try has read its end. A pod being deleted
    that the provider's finalizer holds (``end_hold``) was not read either: its end is kept for a try to read,
    unless it ended on the deletion's signal (``ended_on_a_deletion_signal``)."""
    labels = pod.metadata.labels or {}
    phase = pod.status.phase if pod.status is not None else None
    if phase != "Succeeded" or labels.get(CHECKED_LABEL) == "True":
        return False
    return pod.metadata.deletion_timestamp is None or (held(pod) and not ended_on_a_deletion_signal(to_dict(pod)))


#: The labels that name a task instance (KPO's ``_get_ti_pod_labels``; ``map_index`` only on a mapped one).
IDENTITY_LABELS = ("dag_id", "task_id", "run_id", "map_index")


def _earlier(pod_try: str | None, try_number: int) -> bool:
    return pod_try is not None and pod_try.isdigit() and int(pod_try) < try_number


def take_over(op: KubernetesPodOperator, context: Context, pod: k8s.V1Pod) -> Any:
    """End this try with the pod's outcome, as the earlier try's lost resume would have: no pod is created."""
    name, namespace = pod.metadata.name, pod.metadata.namespace
    op.log.info("Took over try %s's succeeded pod %s/%s instead of running the workload again: no try read its "
                "result", pod.metadata.labels["try_number"], namespace, name)  # fmt: skip
    ti = context["ti"]
    ti.xcom_push(key="pod_name", value=name)  # as KPO's execute pushes them for the pod it follows
    ti.xcom_push(key="pod_namespace", value=namespace)
    return op.trigger_reentry(context, {"status": "success", "name": name, "namespace": namespace})


class UnreadSuccessKept:
    """KPO's ``process_pod_deletion``, except for an earlier try's unread success that a reattach found
    (``get_or_create_pod``, before ``self.pod`` is set): KPO deletes an ended pod there and creates another.
    ``succeeded_unread`` looks before ``execute`` does; a pod that succeeded between that look (it was
    Running) and the reattach's came here, and its workload ran again. It is kept, and KPO's reattach reads it
    as it reads a pod it keeps (``on_finish_action="keep_pod"``): its log, result and end, once."""

    def process_pod_deletion(self, pod: k8s.V1Pod, *, reraise: bool = True) -> bool:
        op: Any = self
        if op.pod is None and pod is not None and op.reattach_on_restart and not op.do_xcom_push:
            ours = (op.pod_request_obj.metadata.labels or {}) if op.pod_request_obj is not None else {}
            labels, this_try = pod.metadata.labels or {}, str(ours.get("try_number"))
            expected = {key: ours[key] for key in IDENTITY_LABELS if key in ours}  # KPO's search matches less
            theirs = labels.get("try_number")
            mine = this_try.isdigit() and identity_mismatch(
                labels, pod.metadata.uid, expected=expected, try_number=int(this_try)
            ) is None  # fmt: skip
            if mine and unread_success(pod) and _earlier(theirs, int(this_try)):
                if set_aside(op, pod, getattr(op, "_orphan_context", None)):  # kept unrecorded, then a Clear
                    return True
                op.log.info("Pod %s of try %s succeeded and no try read its end: this try reads it instead of "
                            "running the workload again", pod.metadata.name, theirs)  # fmt: skip
                return False
        deleted: bool = super().process_pod_deletion(pod, reraise=reraise)  # type: ignore[misc]
        return deleted
