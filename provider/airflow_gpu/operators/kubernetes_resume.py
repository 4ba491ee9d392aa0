"""The deferred ``GPUKubernetesOperator``'s trips through the triggerer: the deferral, and what comes back.

``GPUKubernetesOperator`` translates an accelerator spec into KPO's pod and judges each ended pod;
this mixin (``PodDeferral``) is its deferrable half, kept apart because it deals with what happened
in the triggerer rather than with the pod the worker built. It swaps KPO's trigger for
``GPUPodTrigger`` with the plan of every pod the triggerer may create (``kubernetes_deferral``);
on resume it creates the next pod itself when the trigger decided to but could not
(``_create_next``); and a deferral that timed out deletes every pod of the try, the trigger's
included (``_delete_this_try``), since the worker only knows the pod it deferred on.

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
from airflow.providers.cncf.kubernetes.utils.pod_manager import log_pod_event
from airflow.sdk.exceptions import TaskDeferralTimeout
from kubernetes.client import models as k8s
from kubernetes.client.exceptions import ApiException

from airflow_gpu.operators.kubernetes_deferral import replacement_plan
from airflow_gpu.operators.spot_task import publish
from airflow_gpu.triggers.kubernetes import STATE_KEY, GPUPodTrigger
from airflow_gpu.triggers.pod_replacement import submission_name

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
        is marked checked so that KPO's reattach does not take it for the pod to follow.
        """
        op = _operator(self)
        op.log.warning("The triggerer replaced pod %s but could not create the next one: %s", event["name"],
                         event.get("message"))  # fmt: skip
        with contextlib.suppress(ApiException):
            ended = op.client.read_namespaced_pod(event["name"], event["namespace"])
            op.patch_already_checked(ended, reraise=False)
        publish(context, op.spot_run, None)
        op.pod = op.pod_request_obj = op.remote_pod = None
        op.log.info("Submitting a new pod on %s (%s capacity)", op.accelerator, op.spot_run.capacity)
        op.execute_async(context)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Airflow's resume; a deferral that timed out (``execution_timeout``: the trigger was cancelled, no
        ``on_kill``) deletes this try's pods first, the ones the trigger created included."""
        op = _operator(self)
        try:
            return super().resume_execution(next_method, next_kwargs, context)  # type: ignore[misc]
        except TaskDeferralTimeout:
            try:
                op._delete_this_try(context)
            except Exception:  # the timeout is the task's error; a cleanup that failed is only logged
                op.log.exception("Could not delete this try's pods after the deferral timed out")
            raise

    def _delete_this_try(self, context: Context) -> None:
        op = _operator(self)
        labels = op._get_ti_pod_labels(context)
        selector = ",".join(f"{k}={v}" for k, v in labels.items() if k != "kubernetes_pod_operator")
        namespace = op.namespace or op.hook.get_namespace() or "default"
        try:
            pods = op.client.list_namespaced_pod(namespace, label_selector=selector).items
        except ApiException as error:
            op.log.warning("Could not list this try's pods to delete them (%s %s)", error.status, error.reason)
            return
        for pod in pods:
            op.log.warning("Deleting pod %s/%s: the task's deferral timed out", namespace, pod.metadata.name)
            with contextlib.suppress(ApiException):
                op.client.delete_namespaced_pod(
                    pod.metadata.name, namespace, grace_period_seconds=op.termination_grace_period
                )

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
