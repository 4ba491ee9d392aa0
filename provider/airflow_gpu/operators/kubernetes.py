"""``GPUKubernetesOperator``: a ``KubernetesPodOperator`` that takes an accelerator spec and rides out spot.

What it adds to KPO, and where each piece lives:

* the pod's resources, node affinity, tolerations and ``/dev/shm`` come from the spec
  (``airflow_gpu.accelerators.kubernetes``), the image from ``image="auto"`` or is validated
  (``airflow_gpu.images``), all when the DAG is parsed;
* each finished pod is classified (``airflow_gpu.spot.classifier``) and the ``SpotPolicy``
  decides (``airflow_gpu.spot.policy``): a preempted pod is resubmitted inside the same task try,
  a pod unschedulable past ``capacity_timeout`` moves to the next candidate accelerator and then to
  on-demand, a bug fails the task without burning retries;
* the workload learns its accelerator, attempt and interruptions from the environment, and gets a
  spot notice file (written by a ``preStop`` hook) and SIGTERM with the policy's grace period.

Both modes keep all of it: ``deferrable=True`` resubmits from ``trigger_reentry`` and carries its
state through each deferral. The state also rides on every pod (annotation ``airflow-gpu/state``),
so a retry that reattaches after a worker crash knows the interruptions so far. Reattaching only
takes a pod that carries this task try's identity (dag, task, run, map index, an earlier or equal
try, the uid it recorded): a pod name is a slot, not an identity (apache/airflow#71743).

Everything else is KPO's: pod launching, log streaming, ``on_kill``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

try:
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import add_unique_suffix
    from airflow.providers.cncf.kubernetes.operators.pod import POD_IDENTIFIER_STATE_KEY, KubernetesPodOperator
    from airflow.providers.cncf.kubernetes.utils.pod_manager import PodNotFoundException
    from kubernetes.client import models as k8s
    from kubernetes.client.exceptions import ApiException
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "GPUKubernetesOperator needs the cncf-kubernetes provider: pip install 'airflow-provider-gpu[kubernetes]'"
    ) from error

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_gpu.accelerators.errors import AcceleratorSpecError
from airflow_gpu.accelerators.kubernetes import CAPACITIES, LabelScheme, MigStrategy, to_kubernetes
from airflow_gpu.accelerators.quantities import CpuAmount, MemoryAmount
from airflow_gpu.accelerators.shared_memory import SharedMemory
from airflow_gpu.accelerators.spec import Accelerator, parse_candidates
from airflow_gpu.hooks.kubernetes import cluster_gpu_capacity
from airflow_gpu.images.selection import resolve_image
from airflow_gpu.spot.classifier import Classification, Outcome, classify_pod
from airflow_gpu.spot.policy import Capacity, Placement, SpotPolicy, next_step
from airflow_gpu.utils.kubernetes import pod_operator_arguments
from airflow_gpu.utils.pod_identity import identity_mismatch
from airflow_gpu.utils.results import ACCELERATOR_XCOM_KEY, INTERRUPTIONS_XCOM_KEY, ResultError, last_result

if TYPE_CHECKING:
    from datetime import timedelta

    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

#: Arguments the spec fills in unless the user passed them to the operator.
PLACEMENT_ARGUMENTS = ("container_resources", "affinity", "tolerations", "volumes", "volume_mounts")
#: Where the ``preStop`` hook writes the spot notice; ``{pod}`` keeps pods apart on shared hosts.
SPOT_NOTICE_PATH = "/tmp/airflow-gpu/{pod}/spot-notice"
#: Pod annotation holding the resubmission state, read back when a retry reattaches to the pod.
STATE_ANNOTATION = "airflow-gpu/state"


class GPUKubernetesOperator(KubernetesPodOperator):
    """Run a container on Kubernetes GPUs described by one accelerator spec.

    :param accelerator: ``"H100:8"``, an ``Accelerator``, or candidates in preference order
        (``["H100:8", "A100-80GB:8"]``).
    :param image: ``"auto"`` picks the newest catalog image that runs on the accelerator
        (and ``driver_version``); a reference is validated against every candidate.
    :param cpu: cores (a number or a quantity such as ``"500m"``), requested.
    :param memory: MiB as an int or a quantity such as ``"64Gi"``, requested and limited.
    :param shared_memory: ``/dev/shm`` size: ``"auto"``, ``None`` (runtime default), MiB or a quantity.
    :param capacity: ``"spot"``, ``"on-demand"``, ``"spot-if-available"`` or None (no constraint).
    :param spot: the ``SpotPolicy``; the default resubmits up to 3 preemptions then falls back.
    :param node_label_scheme: ``"nvidia-gfd"``, ``"gke"``, ``"karpenter"``, ``"none"`` or a mapping.
    :param mig_strategy: ``"mixed"`` (``nvidia.com/mig-<profile>`` resources) or ``"single"``.
    :param driver_version: the nodes' NVIDIA driver, to select or validate the image's CUDA.

    Any ``KubernetesPodOperator`` argument works too, and wins where it overlaps (resources,
    affinity, tolerations, volumes, ``termination_grace_period``...).
    """

    template_fields: Sequence[str] = (*KubernetesPodOperator.template_fields, "cpu", "memory")

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
        **kwargs: Any,
    ) -> None:
        self.candidates = parse_candidates(accelerator)
        if capacity is not None and capacity not in CAPACITIES:
            raise AcceleratorSpecError("capacity", capacity, "unknown capacity type", CAPACITIES)
        self.spot = spot if isinstance(spot, SpotPolicy) else SpotPolicy(**(spot or {}))
        self.cpu, self.memory, self.shared_memory = cpu, memory, shared_memory
        self.capacity = capacity
        self.node_label_scheme = LabelScheme.coerce(node_label_scheme)
        self.mig_strategy: MigStrategy = mig_strategy
        self.driver_version = driver_version
        # One image per candidate, resolved (or refused) now, at DAG parse time.
        self.images = tuple(resolve_image(image, c, driver_version) for c in self.candidates)
        self.user_placement = {name for name in PLACEMENT_ARGUMENTS if kwargs.get(name) is not None}
        kwargs.setdefault("termination_grace_period", self.spot.grace_period_seconds)
        kwargs.setdefault("schedule_timeout_seconds", int(self.spot.capacity_timeout))
        kwargs.setdefault("startup_timeout_seconds", max(120, int(self.spot.capacity_timeout)))
        super().__init__(image=self.images[0], **kwargs)
        for candidate in self.candidates[1:]:  # every candidate's placement must translate, now
            self._placement_arguments(Placement(0, capacity), candidate)
        self._placement = Placement(0, capacity)
        self._apply_placement(self._placement)
        self._submissions = 0
        self._interruptions_on_capacity = 0
        self.interruptions: list[dict[str, Any]] = []
        self._last_result: Classification | None = None
        self._logged_result: Any = None

    # --- placement ------------------------------------------------------------------------

    def _placement_arguments(self, placement: Placement, candidate: Accelerator) -> dict[str, Any]:
        spec = to_kubernetes(
            candidate,
            cpu=self.cpu,
            memory=self.memory,
            shared_memory=self.shared_memory,
            capacity=placement.capacity,
            label_scheme=self.node_label_scheme,
            mig_strategy=self.mig_strategy,
        )
        return pod_operator_arguments(spec)

    def _apply_placement(self, placement: Placement) -> None:
        candidate = self.candidates[placement.candidate]
        for name, value in self._placement_arguments(placement, candidate).items():
            if name not in self.user_placement:
                setattr(self, name, value if name != "affinity" or value is not None else {})
        self.image = self.images[placement.candidate]
        self._placement = placement

    @property
    def accelerator(self) -> Accelerator:
        """The candidate the next (or current) pod runs on."""
        return self.candidates[self._placement.candidate]

    # --- pod ------------------------------------------------------------------------------

    def build_pod_request_obj(self, context: Context | None = None, *, dry_run: bool = False) -> k8s.V1Pod:
        """KPO's pod, plus the environment and the spot-notice hook the workload can use."""
        pod = super().build_pod_request_obj(context, dry_run=dry_run)
        container = next(c for c in pod.spec.containers if c.name == self.base_container_name)
        notice_file = SPOT_NOTICE_PATH.format(pod=pod.metadata.name)
        env = {
            "AIRFLOW_GPU_ACCELERATOR": str(self.accelerator),
            "AIRFLOW_GPU_CAPACITY": self._placement.capacity or "any",
            "AIRFLOW_GPU_ATTEMPT": str(self._submissions + 1),
            "AIRFLOW_GPU_INTERRUPTIONS": str(len(self.interruptions)),
            "AIRFLOW_GPU_SPOT_NOTICE_FILE": notice_file,
        }
        container.env = [*(container.env or []), *(k8s.V1EnvVar(name=k, value=v) for k, v in env.items())]
        if container.lifecycle is None:
            notice = f"mkdir -p {notice_file.rsplit('/', 1)[0]} && date -u +%Y-%m-%dT%H:%M:%SZ > {notice_file}"
            container.lifecycle = k8s.V1Lifecycle(
                pre_stop=k8s.V1LifecycleHandler(_exec=k8s.V1ExecAction(command=["/bin/sh", "-c", notice]))
            )
        pod.metadata.labels = {
            **(pod.metadata.labels or {}),
            "airflow-gpu/accelerator": self.accelerator.type.lower(),
            "airflow-gpu/capacity": self._placement.capacity or "any",
        }
        pod.metadata.annotations = {**(pod.metadata.annotations or {}), STATE_ANNOTATION: json.dumps(self._state())}
        return pod

    # --- state that outlives this process: deferrals and worker crashes -------------------

    def _state(self) -> dict[str, Any]:
        return {
            "candidate": self._placement.candidate,
            "capacity": self._placement.capacity,
            "submissions": self._submissions,
            "interruptions_on_capacity": self._interruptions_on_capacity,
            "interruptions": self.interruptions,
        }

    def _restore(self, state: Mapping[str, Any]) -> None:
        candidate = int(state.get("candidate", 0))
        if not 0 <= candidate < len(self.candidates):  # the DAG changed under a running pod
            self.log.warning("Ignoring saved GPU state for candidate %d of %d", candidate, len(self.candidates))
            return
        self._apply_placement(Placement(candidate, state.get("capacity")))
        self._submissions = int(state.get("submissions", 0))
        self._interruptions_on_capacity = int(state.get("interruptions_on_capacity", 0))
        self.interruptions = list(state.get("interruptions", []))

    def _restore_from_pod(self, pod: k8s.V1Pod) -> None:
        saved = (pod.metadata.annotations or {}).get(STATE_ANNOTATION)
        if saved:
            try:
                self._restore(json.loads(saved))
            except (ValueError, TypeError) as error:
                self.log.warning(
                    "Pod %s has an unreadable %s annotation: %s", pod.metadata.name, STATE_ANNOTATION, error
                )

    # --- reattaching: only to this task's own pod -----------------------------------------

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
            self.log.warning(
                "Not reattaching to pod %s/%s recorded for this task: %s",
                pod.metadata.namespace,
                pod.metadata.name,
                mismatch,
            )
            return None
        return pod

    def _persist_pod_identity_to_task_state_store(self, context: Context, pod: k8s.V1Pod) -> None:
        """KPO records name and namespace; the uid goes with them so a reused name is not taken for ours."""
        store = context.get("task_state_store")
        if store is None:
            return
        store.set(
            POD_IDENTIFIER_STATE_KEY,
            {"name": pod.metadata.name, "namespace": pod.metadata.namespace, "uid": pod.metadata.uid},
        )

    def get_or_create_pod(self, pod_request_obj: k8s.V1Pod, context: Context) -> k8s.V1Pod:
        """KPO's get-or-create; a reattached pod brings its saved state, a taken name gets a suffix."""
        try:
            pod: k8s.V1Pod = super().get_or_create_pod(pod_request_obj, context)
        except ApiException as error:
            if error.status != 409:
                raise
            taken = pod_request_obj.metadata.name
            pod_request_obj.metadata.name = add_unique_suffix(name=taken)
            self.log.warning(
                "Pod name %s is taken by a pod that is not this task's; creating %s instead",
                taken,
                pod_request_obj.metadata.name,
            )
            pod = super().get_or_create_pod(pod_request_obj, context)
        if pod is not pod_request_obj:
            self.log.info("Reattached to pod %s of this task", pod.metadata.name)
            self._restore_from_pod(pod)
        return pod

    def cleanup(
        self,
        pod: k8s.V1Pod,
        remote_pod: k8s.V1Pod,
        xcom_result: dict[Any, Any] | None = None,
        context: Context | None = None,
    ) -> None:
        """Classify the pod before KPO deletes it or raises, and make sure an abandoned one is gone."""
        self._last_result = self._logged_result = None
        if not self._killed and (remote_pod or pod) is not None:
            current = self._read_pod(remote_pod or pod)
            self._last_result = classify_pod(current)
            if self._last_result.outcome is Outcome.SUCCEEDED and not self.do_xcom_push:
                self._logged_result = self._result_from_log(remote_pod or pod)
            if current is not None and self._last_result.outcome is Outcome.UNSCHEDULABLE:
                self._delete_and_wait(remote_pod or pod)  # never leave a pending pod to start later
        super().cleanup(pod, remote_pod, xcom_result, context)

    def _read_pod(self, pod: k8s.V1Pod) -> dict[str, Any] | None:
        try:
            fresh = self.client.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        serialized: dict[str, Any] = self.client.api_client.sanitize_for_serialization(fresh)
        return serialized

    def _result_from_log(self, pod: k8s.V1Pod) -> Any:
        """The value of the last ``::airflow-gpu-result::`` line of the base container, if any."""
        response = self.client.read_namespaced_pod_log(
            pod.metadata.name, pod.metadata.namespace, container=self.base_container_name, _preload_content=False
        )
        try:
            return last_result(response.data.decode("utf-8", "replace").splitlines())[1]
        except ResultError as error:  # a bug in the workload: retrying will not fix it
            raise AirflowFailException(str(error)) from error

    def _delete_and_wait(self, pod: k8s.V1Pod) -> None:
        try:
            self.client.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        except ApiException as error:
            if error.status != 404:
                raise
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self._read_pod(pod) is not None:
            time.sleep(0.5)

    # --- the resubmission loop ------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        map_index = getattr(context["ti"], "map_index", None)
        if map_index is not None and map_index >= 0 and self.name:  # pod names carry the map index
            self.name = f"{self.name}-{map_index}"
        return super().execute(context)

    def execute_sync(self, context: Context) -> Any:
        while True:
            self._last_result = None
            try:
                result = super().execute_sync(context)
            except Exception as error:  # classified below; anything unclassified is re-raised
                if self._last_result is None or self._killed:
                    raise
                self._after_failure(context, self._last_result, error)
                continue
            return self._succeed(context, result)

    def defer(
        self,
        *,
        trigger: BaseTrigger,
        method_name: str,
        kwargs: dict[str, Any] | None = None,
        timeout: timedelta | int | float | None = None,
    ) -> Any:
        """KPO's deferral, carrying the resubmission state to the task process that resumes."""
        if method_name == "trigger_reentry":
            kwargs = {**(kwargs or {}), "gpu_state": self._state()}
        super().defer(trigger=trigger, method_name=method_name, kwargs=kwargs, timeout=timeout)

    def trigger_reentry(self, context: Context, event: dict[str, Any], gpu_state: dict[str, Any] | None = None) -> Any:
        """KPO's re-entry from the trigger, with the same classify-and-resubmit as ``execute_sync``."""
        if gpu_state is not None:
            self._restore(gpu_state)
        else:  # ``dag.test()`` resumes with the event only; the pod carries the same state
            with contextlib.suppress(ApiException):
                self._restore_from_pod(self.client.read_namespaced_pod(event["name"], event["namespace"]))
        self._last_result = None
        try:
            result = super().trigger_reentry(context, event)
        except PodNotFoundException as error:  # gone before we could look: preempted with its node
            if self._killed:
                raise
            self.pod = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=event["name"], namespace=event["namespace"]))
            self._after_failure(context, classify_pod(None), error)
            self.execute_async(context)  # a new pod, and defer again
            return None
        except Exception as error:
            if self._last_result is None or self._killed:
                raise
            self._after_failure(context, self._last_result, error)
            self.execute_async(context)
            return None
        return self._succeed(context, result)

    def _succeed(self, context: Context, result: Any) -> Any:
        self._publish(context)
        if self.do_xcom_push:
            return result
        if self._logged_result is not None:
            # Airflow pushes return values only with do_xcom_push, which would add KPO's sidecar.
            context["ti"].xcom_push(key="return_value", value=self._logged_result)
        return self._logged_result

    def _after_failure(self, context: Context, result: Classification, error: Exception) -> None:
        decision = next_step(
            self.spot, result, self._placement, self._interruptions_on_capacity, len(self.candidates), self.capacity
        )
        record = {
            "time": datetime.now(timezone.utc).isoformat(),
            "pod": self.pod.metadata.name if self.pod is not None else None,
            "accelerator": str(self.accelerator),
            "capacity": self._placement.capacity or "any",
            "outcome": result.outcome.value,
            "reason": result.reason,
            "message": result.message,
            "action": decision.action,
            "next": decision.message,
        }
        if result.interrupted:
            self.interruptions = [*self.interruptions, record]  # never mutate a list a copy may share
            self.log.warning("GPU interruption %d: %s", len(self.interruptions), decision.message)
        else:
            self.log.warning("Pod ended %s: %s", result.outcome.value, decision.message)
        self._publish(context)
        if decision.action != "resubmit":
            history = "".join(
                f"\n  - {i['time']} {i['pod']} on {i['accelerator']}/{i['capacity']}: {i['reason']}"
                for i in self.interruptions
            )
            message = decision.message + (f"\nInterruptions:{history}" if history else "")
            if result.outcome is Outcome.UNSCHEDULABLE:
                message += self._capacity_summary()
            if decision.retry_allowed:
                raise AirflowException(message) from error
            raise AirflowFailException(message) from error
        if decision.placement.capacity != self._placement.capacity:
            self._interruptions_on_capacity = 0
        elif decision.counts_as_interruption:
            self._interruptions_on_capacity += 1
        self._submissions += 1
        self._apply_placement(decision.placement)
        self.pod = None
        self.pod_request_obj = None
        self.remote_pod = None
        self.log.info(
            "Submitting a new pod on %s (%s capacity)", self.accelerator, decision.placement.capacity or "any"
        )

    def _capacity_summary(self) -> str:
        try:
            offered = cluster_gpu_capacity(self.client)  # the client KPO built, config_file included
        except Exception:  # the summary is a courtesy; the failure message stands without it
            return ""
        if not offered:
            return "\nThe cluster offers no GPUs."
        return "\nThe cluster offers:" + "".join(f"\n  - {c}" for c in offered)

    def _publish(self, context: Context) -> None:
        ti = context["ti"]
        ti.xcom_push(key=INTERRUPTIONS_XCOM_KEY, value=list(self.interruptions))
        ti.xcom_push(
            key=ACCELERATOR_XCOM_KEY,
            value={"accelerator": str(self.accelerator), "capacity": self._placement.capacity or "any"},
        )
