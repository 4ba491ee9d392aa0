"""The deferred ``GPUKubernetesOperator``'s trips through the triggerer: the deferral, and what comes back.

``GPUKubernetesOperator`` translates an accelerator spec into KPO's pod and judges each ended pod;
this mixin (``PodDeferral``) is its deferrable half, kept apart because it deals with what happened
in the triggerer rather than with the pod the worker built. It swaps KPO's trigger for
``GPUPodTrigger`` with the plan of every pod the triggerer may create (``kubernetes_deferral``);
on resume (``trigger_reentry``) it judges the pod the task resumed for as the synchronous path
does (a pod gone after its success is a success: ``kubernetes_reads`` kept its last read) and
creates the next pod itself when the trigger decided to but could not (``_create_next``); a
deferral that timed out deletes every pod of the try, the trigger's included
(``_delete_this_try``), since the worker only knows the pod it deferred on; and one whose trigger
crashed leaves the latest running pod to the next try where that try would take it over,
deleting every other, or deletes them all (``_after_trigger_failure``, ``retry_handover``).

KPO calls the user's ``callbacks`` around each pod it creates and, with ``log_events_on_startup``,
logs the pod's events while it starts; the pods the trigger created never passed through KPO. On
resume ``_replay_trigger_pods`` does for each of them, in order, what KPO would have done had the
worker replaced the pod: the ended pod's ``on_pod_completion``, ``on_pod_teardown`` and
``on_pod_cleanup``, then the new pod's ``on_pod_manifest_created`` and ``on_pod_creation`` and its
events. The pod the task resumes for gets KPO's own calls from ``trigger_reentry``. The pods are
named by the run's submissions (``pod_replacement.submission_name``), so the deferral's state and
the event's tell which they were, without a list.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from airflow.providers.cncf.kubernetes.callbacks import ExecutionMode
from airflow.providers.cncf.kubernetes.triggers.pod import KubernetesPodTrigger
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodNotFoundException, log_pod_event
from airflow.sdk.exceptions import AirflowSkipException, TaskDeferralError, TaskDeferralTimeout
from kubernetes.client import models as k8s
from kubernetes.client.exceptions import ApiException

from airflow_gpu.operators import kubernetes_profiler, orphaned_try
from airflow_gpu.operators.kubernetes_deferral import replacement_plan
from airflow_gpu.operators.kubernetes_reads import UNREAD
from airflow_gpu.operators.retry_handover import latest_live, live, why_no_takeover
from airflow_gpu.operators.spot_task import publish
from airflow_gpu.spot.classifier import Outcome, classify_deleted_pod
from airflow_gpu.triggers.kubernetes import LAST_SEEN_KEY, NEXT_KEY, STATE_KEY, GPUPodTrigger
from airflow_gpu.triggers.pod_replacement import submission_name
from airflow_gpu.triggers.result_tail import RESULT_LINE_KEY
from airflow_gpu.utils import end_hold
from airflow_gpu.utils.kubernetes import to_dict

if TYPE_CHECKING:
    from datetime import timedelta

    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator


class PodDeferral:
    """The deferrable half of ``GPUKubernetesOperator`` (a mixin: only that operator mixes it in)."""

    def defer(
        self,
        *,
        trigger: BaseTrigger,
        method_name: str,
        kwargs: dict[str, Any] | None = None,
        timeout: timedelta | int | float | None = None,
    ) -> Any:
        """KPO's deferral, on the shared-watch trigger, carrying the run's state to the task process that resumes."""
        op = _operator(self)
        if method_name == "trigger_reentry":
            kwargs = {**(kwargs or {}), "gpu_state": op.spot_run.to_json()}
        if isinstance(trigger, KubernetesPodTrigger) and not isinstance(trigger, GPUPodTrigger):
            context, pod = op._defer_context, op.pod
            plan = replacement_plan(op, context, pod.metadata.name) if context and pod else None
            trigger = GPUPodTrigger.from_official(trigger, gpu_spot=plan)  # one watch per namespace; spot run there
        super().defer(trigger=trigger, method_name=method_name, kwargs=kwargs, timeout=timeout)  # type: ignore[misc]

    def invoke_defer_method(self, last_log_time: Any = None, context: Context | None = None) -> None:
        """KPO's; the context is kept for ``defer``, which builds the pods the trigger may create."""
        op = _operator(self)
        op._defer_context = context
        try:
            super().invoke_defer_method(last_log_time=last_log_time, context=context)  # type: ignore[misc]
        finally:
            op._defer_context = None

    def _create_next(self, context: Context, event: dict[str, Any]) -> None:
        """Create here the pod the trigger could not (a quota, a name held by another pod), and defer again.

        The run's state in the event has the interruption recorded and the placement moved on; the ended pod
        is marked checked so that KPO's reattach does not take it for the pod to follow, and gets the user's
        ``on_pod_completion``, ``on_pod_teardown`` and ``on_pod_cleanup``, as KPO calls them for a pod it is
        done with, before the next pod's ``on_pod_manifest_created`` and ``on_pod_creation`` (KPO's own).
        """
        op = _operator(self)
        op.log.warning("The triggerer replaced pod %s but could not create the next one: %s", event["name"],
                         event.get("message"))  # fmt: skip
        ended = self._pod(event["name"], event["namespace"])
        if ended.status is not None:  # read: it is there to mark, and to let go of
            op.patch_already_checked(ended, reraise=False)
            end_hold.release_quietly(op.client, ended.metadata.name, ended.metadata.namespace, op.log)
        for hook in ("on_pod_completion", "on_pod_teardown", "on_pod_cleanup"):  # KPO's, for a pod it replaces
            self._call_back(hook, context, pod=ended)
        publish(context, op.spot_run, None)
        op.pod = op.pod_request_obj = op.remote_pod = None
        op.log.info("Submitting a new pod on %s (%s capacity)", op.accelerator, op.spot_run.capacity)
        op.execute_async(context)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Airflow's resume; a deferral that timed out (``execution_timeout``: the trigger was cancelled, no
        ``on_kill``) deletes this try's pods first, the ones the trigger created included. One whose trigger
        crashed hands the running pod to the next try, or deletes them too (``_after_trigger_failure``)."""
        op = _operator(self)
        try:
            return super().resume_execution(next_method, next_kwargs, context)  # type: ignore[misc]
        except TaskDeferralTimeout:
            try:
                op._delete_this_try(context, "the task's deferral timed out")
            except Exception:  # the timeout is the task's error; a cleanup that failed is only logged
                op.log.exception("Could not delete this try's pods after the deferral timed out")
            raise
        except TaskDeferralError:
            try:
                self._after_trigger_failure(context)
            except Exception:  # the trigger's failure is the task's error
                op.log.exception("Could not settle this try's pods after its trigger failed")
            raise

    def trigger_reentry(self, context: Context, event: dict[str, Any], gpu_state: dict[str, Any] | None = None) -> Any:
        """KPO's re-entry from the trigger, with the same classify-and-resubmit as ``execute_sync``."""
        op = _operator(self)
        deferred, gpu_state = gpu_state, event.get(STATE_KEY) or gpu_state  # the trigger's, if it carried the run on
        if gpu_state is not None:
            op._restore(gpu_state, "carried through the deferral")
        else:  # ``dag.test()`` resumes with the event only; the pod carries the same state
            with contextlib.suppress(ApiException):
                op._restore_from_pod(op.client.read_namespaced_pod(event["name"], event["namespace"]))
        op.spot_run.submitted(event["name"])
        op._outcome = op._dropped = op._output = op._ended = None
        op._unread, op._gone_succeeded = UNREAD, False
        op.pod_manager.forget()
        orphaned_try.remember(op, context)  # a resumed try has a supervisor of its own: see ``cleanup``
        if carried := event.get(RESULT_LINE_KEY):  # the trigger's read of the result: the pod may be gone now
            op.pod_manager.carried(op.base_container_name, carried)
        op._replay_trigger_pods(context, event, deferred)  # KPO's callbacks and events for the trigger's pods
        if event.get(NEXT_KEY):  # the trigger recorded the pod's end and decided, but could not create the next
            op._create_next(context, event)
            return None
        try:
            result = super().trigger_reentry(context, event)  # type: ignore[misc]
        except AirflowSkipException:
            raise
        except PodNotFoundException as error:  # gone before we could look: preempted with its node?
            if op._killed:
                raise
            op.pod = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=event["name"], namespace=event["namespace"]))
            last_seen = event.get(LAST_SEEN_KEY)  # what the trigger's watch saw of it last
            node = ((last_seen or {}).get("spec") or {}).get("nodeName")
            stays = op.reads.node_stays(node)
            op._outcome = classify_deleted_pod(last_seen, stays, op.base_container_name)
            if op._outcome.outcome is Outcome.SUCCEEDED:  # its workload had ended with 0 before the deletion
                op._succeeded_gone(event["name"], last_seen, node, stays)
                return op._succeed(context, None)
            op._after_failure(context, op._outcome, error)
            op.execute_async(context)  # a new pod, and defer again
            return None
        except Exception as error:
            if not op._killed and kubernetes_profiler.fall_back(op, context, op._ended):
                op.execute_async(context)  # the image cannot start the profiler's wrapper: another way
                return None
            if op._outcome is None and op._dropped is not None:  # gone (404) while KPO waited for it
                dropped = op.pod_manager.last_seen(op._dropped) or to_dict(op._dropped)
                op._outcome = classify_deleted_pod(dropped, None, op.base_container_name)
                if op._outcome.outcome is Outcome.SUCCEEDED and not op._killed:
                    op._succeeded_gone(op._dropped.metadata.name, dropped, None, None)
            if op._gone_succeeded and not op._killed:
                return op._succeed(context, None)
            if op._outcome is None or op._killed or op._outcome.outcome is Outcome.SUCCEEDED:
                raise
            op._after_failure(context, op._outcome, error)
            op.execute_async(context)
            return None
        if event.get("status") == "success" and op.pod is None and not op._gone_succeeded:
            # KPO found the pod gone (404) after the trigger saw it succeed, and returned without its log
            op._succeeded_gone(event["name"], event.get(LAST_SEEN_KEY), None, None)
        return op._succeed(context, result)

    def _clean(self, event: dict[str, Any], result: dict[Any, Any] | None, context: Context) -> None:
        """KPO drops a pod it finds gone (404) while waiting for it; the last read is kept to classify."""
        op = _operator(self)
        seen = op.pod
        super()._clean(event=event, result=result, context=context)  # type: ignore[misc]
        op._dropped = seen if seen is not None and op.pod is None else None

    def _after_trigger_failure(self, context: Context) -> None:
        """The trigger crashed (``__fail__``): the pod it followed, or one it made, runs on. When the next try
        would take it over (``retry_handover``: KPO's reattach is on and a retry comes), only that pod stays,
        the latest live one of this try: training on is what the retry does with it, from where it is, with the
        run's state from its annotation. Every other pod of the try goes, and an ended one is marked checked
        (and deleted as ``on_finish_action`` says) so that neither KPO's label search (which refuses two pods)
        nor the identity in the task state store (now the kept pod's) leads the retry to it. Otherwise every
        pod of the try is deleted, as for a timed-out deferral and as the Batch operator does: nothing would
        follow a pod left running."""
        op = _operator(self)
        why_not = why_no_takeover(op, context)
        pods = self._this_try(context)
        kept = latest_live(pods or []) if why_not is None else None
        if kept is None:
            because = why_not or "no pod of it is running"
            op._delete_this_try(context, f"the task's trigger failed and the next try takes nothing over: {because}")
            return
        namespace = kept.metadata.namespace
        for pod in pods or []:
            if pod is kept:
                continue
            if live(pod):
                op.log.warning("Deleting pod %s/%s: the next try takes over %s", namespace, pod.metadata.name,
                               kept.metadata.name)  # fmt: skip
                # Marked first: a real API server keeps a deleted pod listed for its grace period, and
                # KPO's label search, which skips only checked pods, would find two and refuse both.
                op.patch_already_checked(pod, reraise=False)
                self._delete(pod.metadata.name, namespace)
            else:
                op.patch_already_checked(pod, reraise=False)
                op.process_pod_deletion(pod, reraise=False)
        op._persist_pod_identity_to_task_state_store(context, kept)
        op.log.warning("The task's trigger failed; pod %s/%s runs on for the next try to take over", namespace,
                       kept.metadata.name)  # fmt: skip

    def _this_try(self, context: Context) -> list[k8s.V1Pod] | None:
        """This try's pods, found by its labels (None: they could not be listed)."""
        op = _operator(self)
        labels = op._get_ti_pod_labels(context)
        selector = ",".join(f"{k}={v}" for k, v in labels.items() if k != "kubernetes_pod_operator")
        namespace = op.namespace or op.hook.get_namespace() or "default"
        try:
            pods: list[k8s.V1Pod] = op.client.list_namespaced_pod(namespace, label_selector=selector).items
        except ApiException as error:
            op.log.warning("Could not list this try's pods (%s %s)", error.status, error.reason)
            return None
        return pods

    def _delete_this_try(self, context: Context, because: str) -> None:
        op = _operator(self)
        for pod in self._this_try(context) or []:
            op.log.warning("Deleting pod %s/%s: %s", pod.metadata.namespace, pod.metadata.name, because)
            self._delete(pod.metadata.name, pod.metadata.namespace)

    def _delete(self, name: str, namespace: str) -> None:
        op = _operator(self)
        with contextlib.suppress(ApiException):
            op.client.delete_namespaced_pod(name, namespace, grace_period_seconds=op.termination_grace_period)
        end_hold.release_quietly(op.client, name, namespace, op.log)

    def _replay_trigger_pods(
        self, context: Context, event: Mapping[str, Any], deferred: Mapping[str, Any] | None
    ) -> None:
        """KPO's callbacks and startup events for each pod the trigger created (see the module's docstring)."""
        op = _operator(self)
        made = trigger_made_pods(deferred, event)
        if not made or not (op.callbacks or op.log_events_on_startup):
            return
        namespace = event["namespace"]
        ended = self._pod(str((deferred or {}).get("workload")), namespace)
        for name in made:
            for hook in ("on_pod_completion", "on_pod_teardown", "on_pod_cleanup"):
                self._call_back(hook, context, pod=ended)
            created = self._pod(name, namespace)
            self._call_back("on_pod_manifest_created", context, pod_request=created)
            self._call_back("on_pod_creation", context, pod=created)
            if op.log_events_on_startup:
                seen: set[str] = set()
                with contextlib.suppress(Exception):  # best effort, as KPO's event watch
                    for item in op.pod_manager.read_pod_events(created).items:
                        log_pod_event(op.pod_manager, item, seen)
            ended = created

    def _call_back(self, hook: str, context: Context, **pod: Any) -> None:
        op = _operator(self)
        for callback in op.callbacks:
            getattr(callback, hook)(**pod, client=op.client, mode=ExecutionMode.SYNC, context=context, operator=op)

    def _pod(self, name: str, namespace: str) -> k8s.V1Pod:
        """The pod as it is now; only its name and namespace when it is gone (the trigger deletes ended pods)."""
        try:
            pod: k8s.V1Pod = _operator(self).client.read_namespaced_pod(name, namespace)
            return pod
        except ApiException:
            return k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace))


def trigger_made_pods(deferred: Mapping[str, Any] | None, event: Mapping[str, Any]) -> list[str]:
    """The pods the trigger created, in order, up to the one the event is about: ``<deferred pod>-r<N>``
    for each submission between the deferral's state and the event's. None without both states."""
    carried = event.get(STATE_KEY)
    if not deferred or not carried or not deferred.get("workload"):
        return []
    first, start = str(deferred["workload"]), int(deferred.get("submissions") or 0)
    names = [submission_name(first, n) for n in range(start + 1, int(carried.get("submissions") or 0) + 1)]
    return names[: names.index(event["name"]) + 1] if event.get("name") in names else []


def _operator(mixin: PodDeferral) -> GPUKubernetesOperator:
    """The operator this mixin is part of."""
    return cast("GPUKubernetesOperator", mixin)
