"""``GPUKubernetesOperator``: a ``KubernetesPodOperator`` that takes an accelerator spec and rides out spot.

This module only translates; the pieces live elsewhere. Each pod is KPO's, built from the user's
(rendered) arguments, with the run's placement added on top (``kubernetes_pod``: the spec's parts
from ``accelerators.kubernetes``, added to a user's tolerations, volumes or affinity); the
operator's own fields are never rewritten between pods. Each finished pod is classified
(``spot.classifier``, from what ``kubernetes_reads`` asks the cluster) and the spot run
(``spot.run``) decides: a preempted pod is replaced inside the same task try, a pod unschedulable
past ``capacity_timeout`` moves to the next candidate and then on-demand, a bug fails without
burning retries. The workload gets the run's environment, a spot notice file (``preStop``) and
SIGTERM with the policy's grace period. The run's state rides through each deferral and on every
pod (annotation ``airflow-gpu/state``). A retry reattaches only to a pod with this task try's
identity (dag, task, run, map index, an earlier or equal try, the recorded uid): a name is a slot,
not an identity (apache/airflow#71743). A new try takes over an earlier try's success (a resume lost,
a worker dead after the read) instead of running it again (``kubernetes_takeover``, ``success_mark``).
Everything else is KPO's: pod launching, log streaming, cleanup, ``on_kill``. A deferred task's trips
through the triggerer are ``kubernetes_resume.PodDeferral``'s.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

try:
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import add_unique_suffix
    from airflow.providers.cncf.kubernetes.operators.pod import POD_IDENTIFIER_STATE_KEY, KubernetesPodOperator
    from kubernetes.client import models as k8s
    from kubernetes.client.exceptions import ApiException
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "GPUKubernetesOperator needs the cncf-kubernetes provider: pip install 'airflow-provider-gpu[kubernetes]'"
    ) from error

from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from airflow_gpu.accelerators.errors import AcceleratorSpecError
from airflow_gpu.accelerators.kubernetes import CAPACITIES, LabelScheme, MigStrategy
from airflow_gpu.accelerators.quantities import CpuAmount, MemoryAmount
from airflow_gpu.accelerators.shared_memory import SharedMemory
from airflow_gpu.accelerators.spec import Accelerator, parse_candidates
from airflow_gpu.images.selection import resolve_image
from airflow_gpu.links.profile import GPUProfileLink
from airflow_gpu.operators import kubernetes_profiler, kubernetes_reads, orphaned_try, success_mark, unrecorded_pod
from airflow_gpu.operators.gpu_profile import check_interval, profiled_by_default
from airflow_gpu.operators.kubernetes_pod import STATE_ANNOTATION, dress, placement
from airflow_gpu.operators.kubernetes_reads import (
    UNREAD,
    ClusterReads,
    RetriedLookups,
    RetryingPodManager,
    classify_gone,
    lost_create,
)
from airflow_gpu.operators.kubernetes_release import PodsReleased
from airflow_gpu.operators.kubernetes_resume import PodDeferral
from airflow_gpu.operators.kubernetes_takeover import UnreadSuccessKept, succeeded_unread, take_over
from airflow_gpu.operators.retry_handover import live, why_no_takeover
from airflow_gpu.operators.spot_task import bad_result, fail, publish
from airflow_gpu.spot import admission
from airflow_gpu.spot.classifier import Classification, Outcome, disrupted_by
from airflow_gpu.spot.policy import Capacity, SpotPolicy
from airflow_gpu.spot.run import SpotRun
from airflow_gpu.triggers.interruption_log import log_interruptions
from airflow_gpu.utils.kubernetes import to_dict
from airflow_gpu.utils.pod_identity import identity_mismatch
from airflow_gpu.utils.results import ResultError, WorkloadOutput, missing_result

if TYPE_CHECKING:
    from airflow.sdk import Context


class GPUKubernetesOperator(UnreadSuccessKept, PodsReleased, PodDeferral, RetriedLookups, KubernetesPodOperator):
    """Run a container on Kubernetes GPUs described by one accelerator spec.

    :param accelerator: ``"H100:8"``, an ``Accelerator``, or candidates in preference order
        (``["H100:8", "A100-80GB:8"]``).
    :param image: ``"auto"`` picks the newest catalog image that runs on the accelerator
        (and ``driver_version``); a reference is validated against every candidate.
    :param cpu: cores (a number or a quantity such as ``"500m"``), requested; templated.
    :param memory: MiB as an int or a quantity such as ``"64Gi"``, requested and limited; templated.
    :param shared_memory: ``/dev/shm`` size: ``"auto"``, ``None`` (runtime default), MiB or a quantity.
    :param capacity: ``"spot"``, ``"on-demand"``, ``"spot-if-available"`` or None (no constraint).
    :param spot: the ``SpotPolicy``; the default resubmits up to 3 preemptions then falls back.
    :param node_label_scheme: ``"nvidia-gfd"``, ``"gke"``, ``"karpenter"``, ``"none"`` or a mapping.
    :param mig_strategy: ``"mixed"`` (``nvidia.com/mig-<profile>`` resources) or ``"single"``.
    :param driver_version: the nodes' NVIDIA driver, to select or validate the image's CUDA.
    :param gpu_profile: sample the GPUs while the pod runs (default: on for NVIDIA GPUs); the
        summary, advice and cost go to XCom ``gpu_profile`` and the GPU Profile page. It wraps
        ``cmds``, so it needs them (an image's own entrypoint cannot be wrapped) and a python3 in
        the image; an image without ``/bin/sh`` starts it with python3 alone, one without python3
        runs unprofiled (``kubernetes_profiler``).
    :param profile_interval: seconds between samples (0.05 to 60).
    :param keep_until_read: the finalizer ``airflow-gpu/end-unread`` keeps a deleted pod in the API until the
        task has read how it ended (``utils.end_hold``); False makes pods without it, as KPO does.

    Any ``KubernetesPodOperator`` argument works too. ``container_resources``, ``tolerations``,
    ``affinity``, ``volumes`` and ``volume_mounts`` add to the GPU ones, winning where both set the
    same key; ``termination_grace_period`` and the timeouts replace the policy's.
    """

    template_fields: Sequence[str] = (*KubernetesPodOperator.template_fields, "cpu", "memory")
    operator_extra_links = (GPUProfileLink(),)

    def __init__(
        self,
        *,
        accelerator: str | Accelerator | Sequence[str | Accelerator],
        image: str = "auto",
        cpu: CpuAmount | None = None,
        memory: MemoryAmount | None = None,
        shared_memory: SharedMemory = "auto",
        capacity: Capacity | None = None,
        spot: SpotPolicy | Mapping[str, Any] | None = None,
        node_label_scheme: str | Mapping[str, Any] | LabelScheme = "nvidia-gfd",
        mig_strategy: MigStrategy = "mixed",
        driver_version: str | None = None,
        gpu_profile: bool | None = None,
        profile_interval: float = 1.0,
        keep_until_read: bool = True,
        **kwargs: Any,
    ) -> None:
        self.candidates = parse_candidates(accelerator)
        self.gpu_profile = profiled_by_default(self.candidates) if gpu_profile is None else bool(gpu_profile)
        self.profile_interval, self.keep_until_read = check_interval(profile_interval), bool(keep_until_read)
        if capacity is not None and capacity not in CAPACITIES:
            raise AcceleratorSpecError("capacity", capacity, "unknown capacity type", CAPACITIES)
        self.spot = spot if isinstance(spot, SpotPolicy) else SpotPolicy(**(spot or {}))
        self.cpu, self.memory, self.shared_memory, self.capacity = cpu, memory, shared_memory, capacity
        self.node_label_scheme = LabelScheme.coerce(node_label_scheme)
        self.mig_strategy: MigStrategy = mig_strategy
        self.driver_version = driver_version  # the images below are resolved (or refused) at DAG parse time
        self.images = tuple(resolve_image(image, c, driver_version) for c in self.candidates)
        kwargs.setdefault("termination_grace_period", self.spot.grace_period_seconds)
        kwargs.setdefault("schedule_timeout_seconds", int(self.spot.capacity_timeout))
        kwargs.setdefault("startup_timeout_seconds", max(120, int(self.spot.capacity_timeout)))
        super().__init__(image=self.images[0], **kwargs)
        if not any(isinstance(v, str) and "{{" in v for v in (cpu, memory)):  # else translated once rendered
            for index in range(len(self.candidates)):
                placement(self, index, capacity)
        self.spot_run = SpotRun.start(self.spot, self.candidates, "kubernetes", capacity)
        self._outcome: Classification | None = None
        self._logged_result: Any = None
        self._result_error: ResultError | None = None
        self._output: WorkloadOutput | None = None  # what the ended pod's log held
        self._unread: str | None = None  # why its log could not be read
        self._dropped: k8s.V1Pod | None = None  # the pod KPO's _clean found gone
        self._gone_succeeded = False  # the pod was deleted after it succeeded, before its end was read
        self._ended: dict[str, Any] | None = None  # the ended pod as last read, for ``kubernetes_profiler``
        self._forms_recalled = False  # the profiler forms of earlier tries were read (``kubernetes_profiler``)
        self._defer_context: Context | None = None  # while KPO's invoke_defer_method runs

    @property
    def accelerator(self) -> Accelerator:  # the candidate the next (or current) pod runs on
        return self.candidates[self.spot_run.placement.candidate]

    @cached_property
    def reads(self) -> ClusterReads:
        """What the cluster says of an ended pod and its node, through KPO's client."""
        return ClusterReads(self.client, self.pod_manager)

    @cached_property
    def pod_manager(self) -> RetryingPodManager:
        """KPO's, with its calls asked again for minutes on 429, 5xx and resets (``kubernetes_reads``)."""
        return RetryingPodManager(kube_client=self.client, callbacks=self.callbacks,
                                  stop=lambda: orphaned_try.stop_if_orphaned(self))  # fmt: skip

    # --- the pod: KPO's, plus the run's placement -----------------------------------------

    def build_pod_request_obj(self, context: Context | None = None, *, dry_run: bool = False) -> k8s.V1Pod:
        """KPO's pod with the placement added, the run's environment, the spot-notice hook and state
        (``kubernetes_pod``)."""
        return dress(self, super().build_pod_request_obj(context, dry_run=dry_run), context)

    # --- state that outlives this process: deferrals and worker crashes -------------------

    def _restore(self, state: Mapping[str, Any] | None, where: str) -> None:
        if state is not None and (ignored := self.spot_run.restore(state)):
            self.log.warning("Ignoring the GPU state %s: %s", where, ignored)

    def _restore_from_pod(self, pod: k8s.V1Pod) -> None:
        saved = (pod.metadata.annotations or {}).get(STATE_ANNOTATION)
        try:
            self._restore(json.loads(saved) if saved else None, f"on pod {pod.metadata.name}")
        except (ValueError, TypeError) as error:
            self.log.warning("Pod %s has an unreadable %s annotation: %s", pod.metadata.name, STATE_ANNOTATION, error)

    def _get_pod_from_task_state_store(self, context: Context) -> k8s.V1Pod | None:
        """KPO's durable reconnect, fenced: the pod must carry this task try's identity."""
        pod: k8s.V1Pod | None = super()._get_pod_from_task_state_store(context)
        if pod is None:
            return None
        store = context.get("task_state_store")
        stored = store.get(POD_IDENTIFIER_STATE_KEY) if store is not None else None
        mismatch = identity_mismatch(
            pod.metadata.labels or {},
            pod.metadata.uid,
            expected=self._get_ti_pod_labels(context, include_try_number=False),
            try_number=context["ti"].try_number,
            recorded_uid=str(stored["uid"]) if isinstance(stored, dict) and stored.get("uid") else None,
        )
        if mismatch:
            self.log.warning("Not reattaching to pod %s/%s: %s", pod.metadata.namespace, pod.metadata.name, mismatch)
            return None
        return pod

    def _persist_pod_identity_to_task_state_store(self, context: Context, pod: k8s.V1Pod) -> None:
        """KPO records name and namespace; the uid goes with them so a reused name is not taken for ours."""
        store = context.get("task_state_store")
        if store is not None:
            identity = {"name": pod.metadata.name, "namespace": pod.metadata.namespace, "uid": pod.metadata.uid}
            store.set(POD_IDENTIFIER_STATE_KEY, identity)

    def get_or_create_pod(self, pod_request_obj: k8s.V1Pod, context: Context) -> k8s.V1Pod:
        """KPO's get-or-create; a reattached pod brings its saved state, a taken name gets a suffix."""
        orphaned_try.stop_if_orphaned(self)  # every pod, deferred or not, is made here: none by an orphan
        try:
            pod: k8s.V1Pod = super().get_or_create_pod(pod_request_obj, context)
        except ApiException as error:
            if admission.refused(error.status, admission.status_message(error.body)):  # one line, the policy decides
                self._refused(context, error, pod_request_obj.metadata.namespace)
            if error.status != 409:
                raise
            if (ours := lost_create(self, pod_request_obj, context)) is not None:
                pod = ours
                self.spot_run.submitted(pod.metadata.name)
                return pod
            taken = pod_request_obj.metadata.name
            pod_request_obj.metadata.name = add_unique_suffix(name=taken)
            self.log.warning("Pod name %s is another task's; creating %s", taken, pod_request_obj.metadata.name)
            pod = super().get_or_create_pod(pod_request_obj, context)
        if pod is not pod_request_obj:
            self.log.info("Reattached to pod %s of this task", pod.metadata.name)
            self._restore_from_pod(pod)
            orphaned_try.mark_taken(self, pod)  # its maker, if it lives on orphaned, leaves it to this try
        self.spot_run.submitted(pod.metadata.name)
        return pod

    def _refused(self, context: Context, error: ApiException, namespace: str | None) -> NoReturn:
        """The API server would not create the pod (a ResourceQuota, LimitRange, PodSecurity, a webhook, RBAC):
        the task fails with its words, the namespace, the quota and what to do (``spot.admission``), not KPO's
        dump of the exception; the policy decides (no spot budget spent, Airflow's retries apply)."""
        refusal = admission.read(admission.status_message(error.body) or str(error.reason), namespace)
        decision = self.spot_run.finish(admission.refused_pod(refusal))
        publish(context, self.spot_run, None)
        fail(self.spot_run, decision)

    def cleanup(
        self,
        pod: k8s.V1Pod,
        remote_pod: k8s.V1Pod,
        xcom_result: dict[Any, Any] | None = None,
        context: Context | None = None,
    ) -> None:
        """Classify the pod, read its result, then let KPO clean up. KPO cleans up only a pod it read back; one created
        but never read back (the API throttled or down past the retry budget) is read here and, while it runs,
        deleted (unless ``on_finish_action="keep_pod"``). A try whose supervisor died leaves the pod to its retry or
        deletes it (``orphaned_try``). A pod Succeeded on a deletion's signal fails. A success that could not be
        recorded keeps its pod for a retry (``unrecorded_pod``)."""
        if orphaned_try.orphaned(self):  # its retry takes the pod over, if one will
            kept = context is not None and why_no_takeover(self, context) is None
            return orphaned_try.settle(self, remote_pod or self.pod, kept, context)
        self._outcome = self._logged_result = self._result_error = self._output = None
        self._unread = UNREAD
        if not self._killed and self.pod is not None and remote_pod is None:
            with contextlib.suppress(ApiException):
                remote_pod = self.pod_manager.read_pod(self.pod)
            if remote_pod is not None and live(remote_pod) and self.on_finish_action != "keep_pod":
                self.log.warning("Deleting pod %s: the task fails before the pod ends", self.pod.metadata.name)
                with contextlib.suppress(ApiException):
                    self.pod_manager.delete_pod(remote_pod)
                return
        recorded = True
        try:  # only a pod that was created: a refused create (quota, webhook) stays KPO's error
            if not self._killed and self.pod is not None:
                self._classify(remote_pod or self.pod)
                recorded = unrecorded_pod.record_pod(self, context)  # before KPO deletes the pod: a retry finds it
        finally:
            if recorded:
                super().cleanup(pod, remote_pod, xcom_result, context)
            else:  # the pod is the record: kept for a retry to take over
                unrecorded_pod.keep(self, remote_pod or self.pod, context)
        kubernetes_reads.stopped_on_deletion(self._outcome, self._ended)  # KPO fails any other phase

    def _classify(self, pod: k8s.V1Pod) -> None:
        self._ended = current = self.reads.pod(pod)
        if current is None:  # gone: a node reclaim, a drain, or deleted by a person while its node stayed
            last_seen = self.pod_manager.last_seen(pod) or to_dict(pod)  # ``pod`` may be as created, stale
            node = ((last_seen.get("spec") or {}).get("nodeName")) or (pod.spec.node_name if pod.spec else None)
            node_stays = self.reads.node_stays(node)
            self._outcome = classify_gone(self.pod_manager, last_seen, node_stays, self.base_container_name)
            if self._outcome.outcome is Outcome.SUCCEEDED:
                self._succeeded_gone(pod.metadata.name, last_seen, node, node_stays)
            return
        self._outcome = self.reads.classify(current, self.base_container_name)
        if self._outcome.outcome is not Outcome.UNSCHEDULABLE and (self.gpu_profile or not self.do_xcom_push):
            self._output, self._unread = self.reads.output(pod, self.base_container_name)
        if self._outcome.outcome is Outcome.SUCCEEDED and not self.do_xcom_push:  # a log gone (PodGC, a drain)
            kept = self._output or self.pod_manager.followed_output(self.base_container_name)
            self._logged_result, self._result_error = kept.result, kept.result_error  # an error: raised later
        if self._outcome.outcome is Outcome.UNSCHEDULABLE:
            self.reads.delete_and_wait(pod)  # never leave a pending pod to start later

    def _succeeded_gone(
        self, name: str, last_seen: dict[str, Any] | None, node: str | None, stays: bool | None
    ) -> None:
        """The pod succeeded and was deleted (a drain, PodGC, a person) before its end was read: a success, not an
        interruption (issue 26), its result from the log lines followed, else a warning naming who deleted it."""
        self._gone_succeeded = True
        self._output = self.pod_manager.followed_output(self.base_container_name)
        if self._output.result_found and not self.do_xcom_push:
            self._logged_result, self._result_error = self._output.result, self._output.result_error
            self.log.warning("Pod %s succeeded and was then deleted before its end was read; its result line had "
                             "been read from its log", name)  # fmt: skip
            return
        who = disrupted_by(last_seen) or (
            f"its node {node} is being drained or removed" if stays is False and node else "deleted through the API"
        )
        self._unread = f"the pod was deleted after it succeeded, before its result could be read ({who})"
        self.log.warning("%s", missing_result(f"Pod {name}", self._unread))

    def result_missing(self, workload: str) -> str | None:
        """The warning for a success without a readable result line (its log unread, or no such line),
        from the last pod's log or the training Job's main pod's; None when the line was read."""
        if self._output is not None and self._output.result_found:
            return None
        return missing_result(workload, self._unread if self._output is None else self._output.unread)

    def _publish_profile(self, context: Context, pod_name: str | None, node: str | None) -> None:
        kubernetes_profiler.publish(self, context, pod_name, node)

    def execute(self, context: Context) -> Any:
        """KPO's; a new try first takes over a success an earlier try read (``success_mark``) or a succeeded pod
        no try read (``kubernetes_takeover``) instead of running the workload again."""
        orphaned_try.remember(self, context)  # Airflow's task supervisor: see ``cleanup``
        if self.reattach_on_restart and (mark := success_mark.recorded(context)) is not None:  # read, then died
            return success_mark.take_over(self, context, mark)
        if (unread := succeeded_unread(self, context)) is not None:
            return take_over(self, context, unread)
        return super().execute(context)

    def execute_sync(self, context: Context) -> Any:
        while True:
            if self._killed:  # on_kill between two pods: no new one
                raise AirflowException("the task was killed; no new pod is submitted")
            self._outcome, self._output, self._unread, self._ended = None, None, UNREAD, None
            self._gone_succeeded = False
            self.pod_manager.forget()
            try:
                result = super().execute_sync(context)
            except AirflowSkipException:  # skip_on_exit_code: KPO's answer stands
                raise
            except Exception as error:  # classified below; anything unclassified is re-raised
                if orphaned_try.orphaned(self):  # nothing more: no pod made, none judged (``cleanup`` left it)
                    raise
                if not self._killed and kubernetes_profiler.fall_back(self, context, self._ended):
                    continue  # the image cannot start the profiler's wrapper: the same pod, another way
                if self._gone_succeeded and not self._killed:  # deleted after its success, before KPO read it
                    return self._succeed(context, None)
                if self._outcome is None or self._killed or self._outcome.outcome is Outcome.SUCCEEDED:
                    raise
                self._after_failure(context, self._outcome, error)
                continue
            return self._succeed(context, result)

    def _succeed(self, context: Context, result: Any) -> Any:
        unrecorded_pod.record_kept(self, context)  # a pod kept unrecorded, while the try lives on
        self.spot_run.finish(self._outcome or Classification(Outcome.SUCCEEDED, "Succeeded"))
        publish(context, self.spot_run, self._node())
        self._publish_profile(context, self.spot_run.workload, self._node())
        if self._result_error is not None:
            raise bad_result(self._result_error) from self._result_error
        if self.do_xcom_push:
            return result
        if self._logged_result is not None:  # Airflow pushes it only with do_xcom_push (KPO's sidecar)
            context["ti"].xcom_push(key="return_value", value=self._logged_result)
        return self._logged_result

    def _after_failure(self, context: Context, result: Classification, error: Exception) -> None:
        """Hand the ended pod to the run: resubmit (a fresh pod next) or raise the failure."""
        node, pod, last = self._node(), self.spot_run.workload or "?", self.remote_pod or self.pod
        decision = self.spot_run.finish(result, location=node, identity=last.metadata.uid if last else None)
        log_interruptions(self.log, self.spot_run, decision, pod)
        publish(context, self.spot_run, node)
        self._publish_profile(context, pod, node)
        if decision.action != "resubmit":
            detail = self.reads.capacity_summary() if result.outcome is Outcome.UNSCHEDULABLE else ""
            fail(self.spot_run, decision, detail, error)
        self.pod = self.pod_request_obj = self.remote_pod = None
        self.log.info("Submitting a new pod on %s (%s capacity)", self.accelerator, self.spot_run.capacity)

    def _node(self) -> str | None:  # where the last pod ran
        return getattr(getattr(self.remote_pod or self.pod, "spec", None), "node_name", None)
