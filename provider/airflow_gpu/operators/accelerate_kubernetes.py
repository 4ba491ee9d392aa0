"""``AccelerateTrainOperator`` on Kubernetes: one GPU pod, or an Indexed Job of machines.

One machine is a ``GPUKubernetesOperator`` pod running ``accelerate launch``: its spot run,
fallback, profile and result are that operator's. Several machines are an Indexed Job
(``completionMode: Indexed``, ``completions = parallelism = num_machines``) and a headless Service,
the shape the Kubernetes docs give for "Indexed Job with pod-to-pod communication": each pod's
hostname is ``<job>-<index>``, its subdomain the Service, so ``<job>-0.<service>`` is the main
machine; ``JOB_COMPLETION_INDEX`` is the machine rank. The Service publishes not-ready addresses
so that the other machines can resolve the main one while it starts.

The pod template is the one ``GPUKubernetesOperator`` builds (placement, spot environment,
profiler, spot-notice hook), so one machine and many look alike on the nodes. The Job's
``backoffLimit`` is 0: a rank that dies (a spot reclaim) ends the whole Job, since the other ranks
cannot go on without it; this module classifies the pods, counts one interruption per Job in the
operator's spot run, and creates the Job again within the policy (or fails as the policy says).
cncf-kubernetes' ``KubernetesJobOperator`` builds its pod with ``KubernetesPodOperator``'s code,
without the GPU placement, creates no Service and does not restart on preemption, so the Job is
built here from ``GPUKubernetesOperator``'s pod.

Jobs and Services are deleted with ``propagationPolicy: Foreground`` (the API's default for a
Job is to orphan its pods) at the end, on failure and on kill; a later try deletes what an
earlier try of the same task instance left.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_gpu.operators.delegation import DelegatedRun, outside_the_users_dag
from airflow_gpu.operators.spot_task import bad_result, fail, log_interruptions, publish
from airflow_gpu.spot.classifier import Classification, Outcome, classify_deleted_pod, classify_pod
from airflow_gpu.utils.pod_log_follower import PodLogFollower
from airflow_gpu.utils.results import read_output

if TYPE_CHECKING:
    from airflow.sdk import Context
    from kubernetes.client import models as k8s

    from airflow_gpu.accelerators.accelerate import AccelerateLaunch
    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
    from airflow_gpu.spot.policy import Capacity

#: The environment variable holding the main machine's address, ``<job>-0.<service>``.
ENV_MAIN_ADDRESS = "AIRFLOW_GPU_MAIN_PROCESS_IP"
#: The label that ties a training Job's pods to its Service.
JOB_LABEL = "airflow-gpu/training-job"
#: What ended a Job, most telling first: a rank killed by a reclaim explains the ranks that then
#: lost their peer (an application error) and the ones the Job controller deleted.
CAUSE_ORDER = (
    Outcome.PREEMPTED,
    Outcome.EVICTED,
    Outcome.UNSCHEDULABLE,
    Outcome.INFRASTRUCTURE,
    Outcome.APPLICATION,
    Outcome.UNKNOWN,
    Outcome.DELETED,
)
#: How long deleting a Job may take to remove its pods (their grace period comes on top).
DELETE_WAIT_SECONDS = 60.0
#: How long the machines' logs may take to be read to their end once the Job has ended.
LOG_DRAIN_SECONDS = 60.0


def backend_operator(
    launch: AccelerateLaunch, kwargs: Mapping[str, Any], env: Mapping[str, str], *, capacity: Capacity | None
) -> GPUKubernetesOperator:
    """The ``GPUKubernetesOperator`` whose pod runs one machine of the launch."""
    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

    arguments = dict(kwargs)
    given = arguments.pop("env_vars", None) or {}
    if not isinstance(given, Mapping):
        raise TypeError("AccelerateTrainOperator(target='kubernetes') takes env_vars as a mapping; use env=")
    arguments["do_xcom_push"] = False  # the result line, not KPO's sidecar
    arguments.setdefault("name", arguments["task_id"])
    return GPUKubernetesOperator(
        **outside_the_users_dag(),
        cmds=launch.command('"$JOB_COMPLETION_INDEX"', f'"${ENV_MAIN_ADDRESS}"'),
        env_vars={**given, **launch.environment(), **env},
        capacity=capacity,
        **arguments,
    )


def runner(operator: GPUKubernetesOperator, launch: AccelerateLaunch, *, poll_interval: float, log: Any) -> Any:
    """What runs the launch: the operator's own pod for one machine, an Indexed Job for several."""
    if launch.num_machines == 1:
        return DelegatedRun(operator)
    return IndexedJobTraining(operator, launch, poll_interval, log)


def _dns_label(text: str, limit: int) -> str:
    """A DNS-1035 label (a Service name): lower case, letters first, at most ``limit`` characters."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not label or not label[0].isalpha():
        label = "t-" + label
    return label[:limit].rstrip("-")


class IndexedJobTraining:
    """One training over several machines: Jobs created, watched, classified and replaced."""

    def __init__(self, operator: GPUKubernetesOperator, launch: AccelerateLaunch, poll_interval: float, log: Any):
        self.op, self.launch, self.poll_interval, self.log = operator, launch, poll_interval, log
        self.job: str | None = None
        self._job_uid: str | None = None
        self.namespace = "default"
        self._killed = threading.Event()
        self._followers: dict[str, PodLogFollower] = {}

    @property
    def jobs(self) -> Any:
        from kubernetes.client import BatchV1Api

        return BatchV1Api(self.op.client.api_client)

    def run(self, context: Context) -> Any:
        op = self.op
        self.namespace = op.namespace or op.hook.get_namespace() or "default"
        self._remove_earlier_tries(context)
        while True:
            if self._killed.is_set():
                raise AirflowException("the task was killed; no new training Job is created")
            pods = self._submit(context)
            outcome, culprit, seen = self._wait()
            self._finish_logs()
            node = ((culprit or {}).get("spec") or {}).get("nodeName")
            decision = op.spot_run.finish(outcome, workload=self.job, location=node, identity=self._job_uid)
            op._output, op._unread = self._read_main_log(seen)
            publish(context, op.spot_run, node)
            main = self._main_pod(seen)
            op._publish_profile(context, main["metadata"]["name"] if main else self.job, node)
            self._delete(self.job)
            if self._killed.is_set():
                raise AirflowException("the task was killed; the training Job was deleted")
            if decision.action == "succeed":
                return self._result()
            log_interruptions(self.log, op.spot_run, decision, f"{self.job} (Indexed Job of {pods})")
            if decision.action != "resubmit":
                fail(op.spot_run, decision)
            self.log.info("Creating the training Job again on %s (%s capacity)", op.accelerator, op.spot_run.capacity)

    # --- the objects ----------------------------------------------------------------------

    def _submit(self, context: Context) -> int:
        """The Service and the Indexed Job, from ``GPUKubernetesOperator``'s pod for the current placement."""
        from kubernetes.client import models as k8s
        from kubernetes.client.exceptions import ApiException

        op = self.op
        pod: k8s.V1Pod = op.build_pod_request_obj(context)
        job = _dns_label(f"{pod.metadata.name[:40]}-{secrets.token_hex(2)}", 47)
        machines = self.launch.num_machines
        container = next(c for c in pod.spec.containers if c.name == op.base_container_name)
        main = f"{job}-0.{job}"
        container.env = [*(e for e in container.env or [] if e.name != ENV_MAIN_ADDRESS)]
        container.env.append(k8s.V1EnvVar(name=ENV_MAIN_ADDRESS, value=main))
        pod.spec.subdomain, pod.spec.hostname, pod.spec.restart_policy = job, None, "Never"
        labels = {**(pod.metadata.labels or {}), JOB_LABEL: job}
        template = k8s.V1PodTemplateSpec(
            metadata=k8s.V1ObjectMeta(labels=labels, annotations=pod.metadata.annotations), spec=pod.spec
        )
        body = k8s.V1Job(
            api_version="batch/v1",
            kind="Job",
            metadata=k8s.V1ObjectMeta(
                name=job, namespace=self.namespace, labels=labels, annotations=pod.metadata.annotations
            ),
            spec=k8s.V1JobSpec(
                completion_mode="Indexed",
                completions=machines,
                parallelism=machines,
                backoff_limit=0,  # one rank lost ends the Job; the spot run decides what comes next
                template=template,
                active_deadline_seconds=op.active_deadline_seconds,
            ),
        )
        service = k8s.V1Service(
            api_version="v1",
            kind="Service",
            metadata=k8s.V1ObjectMeta(name=job, namespace=self.namespace, labels=labels),
            spec=k8s.V1ServiceSpec(
                cluster_ip="None",
                selector={JOB_LABEL: job},
                publish_not_ready_addresses=True,  # the main machine resolves while it starts
                ports=[k8s.V1ServicePort(name="rendezvous", port=self.launch.main_process_port)],
            ),
        )
        # The Service first: the machines look the main one up as they start. Then the Job, and the
        # Job becomes the Service's owner, so that the garbage collector removes both together.
        op.client.create_namespaced_service(self.namespace, service)
        self.job = job
        try:
            created = self.jobs.create_namespaced_job(self.namespace, body)
        except Exception:
            self._delete(job)
            raise
        self._job_uid = created.metadata.uid
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": created.metadata.uid}
        try:  # a courtesy for the garbage collector: this operator deletes the Service itself
            op.client.patch_namespaced_service(job, self.namespace, {"metadata": {"ownerReferences": [owner]}})
        except ApiException as error:
            self.log.warning("Service %s was not given its Job as owner (%s %s)", job, error.status, error.reason)
        op.spot_run.submitted(job)
        self.log.info(
            "Created Indexed Job %s/%s: %d machines of %s, rendezvous at %s:%d",
            self.namespace, job, machines, op.accelerator, main, self.launch.main_process_port,
        )  # fmt: skip
        return machines

    # --- waiting ----------------------------------------------------------------------------

    def _pods(self) -> dict[str, dict[str, Any]]:
        from airflow_gpu.utils.kubernetes import to_dict

        listed = self.op.client.list_namespaced_pod(self.namespace, label_selector=f"{JOB_LABEL}={self.job}")
        return {p.metadata.name: to_dict(p) for p in listed.items}

    def _wait(self) -> tuple[Classification, dict[str, Any] | None, dict[str, dict[str, Any]]]:
        """Until the Job is Complete or Failed (or its pods cannot be scheduled in time): how it ended,
        the pod that tells why, and the last state of every pod seen."""
        from kubernetes.client.exceptions import ApiException

        seen: dict[str, dict[str, Any]] = {}
        stuck: dict[Outcome, float] = {}  # since when some pod cannot be scheduled, or cannot start
        timeouts = {
            Outcome.UNSCHEDULABLE: self.op.spot.capacity_timeout,
            Outcome.INFRASTRUCTURE: float(self.op.startup_timeout_seconds),  # an image that does not pull...
        }
        while True:
            try:
                job = self.jobs.read_namespaced_job(self.job, self.namespace)  # `get jobs`, not jobs/status
            except ApiException as error:
                if error.status != 404:
                    raise
                return Classification(Outcome.DELETED, "JobDeleted", f"Job {self.job} was deleted"), None, seen
            current = self._pods()
            for name, pod in current.items():
                seen[name] = pod
                if (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed"):
                    self._follow(name, pod)  # ended between two looks: its log is still there to read
            for name in set(seen) - set(current):
                seen[name].setdefault("_gone", True)
            conditions = {c.type: c for c in (job.status.conditions or []) if c.status == "True"}
            if "Complete" in conditions:
                return Classification(Outcome.SUCCEEDED, "Succeeded", exit_code=0), self._main_pod(seen), seen
            if "Failed" in conditions or "FailureTarget" in conditions:
                outcome, culprit = self._cause(seen)
                if "Failed" in conditions or outcome.outcome is not Outcome.RUNNING:
                    return outcome, culprit, seen
            # A pod that cannot be scheduled, or cannot start, never fails the Job: it waits, the others
            # wait for it at the rendezvous. Past the timeout, that pod's reason ends the Job.
            for kind, timeout in timeouts.items():
                blocked = [p for p in current.values() if classify_pod(p).outcome is kind]
                if not blocked:
                    stuck.pop(kind, None)
                elif time.monotonic() - stuck.setdefault(kind, time.monotonic()) > timeout:
                    return classify_pod(blocked[0]), blocked[0], seen
            if self._killed.is_set():
                return Classification(Outcome.DELETED, "Killed", "the task was killed"), None, seen
            time.sleep(self.poll_interval)

    def _cause(self, seen: Mapping[str, dict[str, Any]]) -> tuple[Classification, dict[str, Any] | None]:
        found: list[tuple[Classification, dict[str, Any]]] = []
        for pod in seen.values():
            if pod.get(
                "_gone"
            ):  # the Job controller deletes a failed Job's running pods: only a node gone is a reclaim
                node = (pod.get("spec") or {}).get("nodeName")
                result = classify_deleted_pod(pod, self.op._node_stays(node))
            else:
                result = classify_pod(pod)
                node = (pod.get("spec") or {}).get("nodeName")
                if result.outcome is Outcome.RUNNING and node and self.op._node_stays(node) is False:
                    result = classify_deleted_pod(pod, False)  # its node went away without a word: a reclaim
            if result.outcome in CAUSE_ORDER:
                found.append((result, pod))
        if not found:
            return Classification(Outcome.RUNNING, "Running"), None
        return min(found, key=lambda item: CAUSE_ORDER.index(item[0].outcome))

    def _main_pod(self, seen: Mapping[str, dict[str, Any]]) -> dict[str, Any] | None:
        mains = [
            p for p in seen.values()
            if (p["metadata"].get("annotations") or {}).get("batch.kubernetes.io/job-completion-index") == "0"
        ]  # fmt: skip
        return mains[-1] if mains else None

    def _follow(self, name: str, pod: Mapping[str, Any]) -> None:
        """Each machine's output into the task log as it comes, prefixed by its rank."""
        if name in self._followers:
            return
        rank = (pod["metadata"].get("annotations") or {}).get("batch.kubernetes.io/job-completion-index", "?")

        def emit(line: str) -> None:
            if line.strip() and not line.startswith("::airflow-gpu-"):  # those are read at the end
                self.log.info("[machine %s] %s", rank, line)

        self._followers[name] = PodLogFollower(
            self.op.client, self.namespace, name, self.op.base_container_name, emit, warn=self.log.warning
        ).start()

    def _finish_logs(self) -> None:
        """Every machine's log read to its end before the outcome is told, so no line is cut off."""
        deadline = time.monotonic() + LOG_DRAIN_SECONDS
        for name, follower in self._followers.items():
            if self._killed.is_set():
                follower.stop()
            elif not follower.finish(max(0.0, deadline - time.monotonic())):
                self.log.warning("The log of %s was not read to its end in time; the rest is in the pod", name)
        self._followers.clear()

    def _read_main_log(self, seen: Mapping[str, dict[str, Any]]) -> tuple[Any, str | None]:
        main = self._main_pod(seen)
        if main is None:
            return None, "the main machine's pod was never seen"
        try:
            response = self.op.client.read_namespaced_pod_log(
                main["metadata"]["name"], self.namespace, container=self.op.base_container_name, _preload_content=False
            )
        except Exception as error:
            return None, f"its log could not be read ({type(error).__name__}: {error})"
        return read_output(response.data.decode("utf-8", "replace").splitlines()), None

    def _result(self) -> Any:
        output = self.op._output
        if output is None:
            return None
        if output.result_error is not None:
            raise bad_result(output.result_error) from output.result_error
        return output.result if output.result_found else None

    # --- cleaning up ------------------------------------------------------------------------

    def _delete(self, job: str | None, wait: bool = True) -> None:
        """The Job and its pods (Foreground: the Job stays until its pods are gone), and the Service."""
        from kubernetes.client.exceptions import ApiException

        if job is None:
            return
        with contextlib.suppress(ApiException):
            self.jobs.delete_namespaced_job(job, self.namespace, propagation_policy="Foreground")
        with contextlib.suppress(ApiException):
            self.op.client.delete_namespaced_service(job, self.namespace)
        deadline = time.monotonic() + DELETE_WAIT_SECONDS + (self.op.termination_grace_period or 30)
        while wait and time.monotonic() < deadline:
            try:
                self.jobs.read_namespaced_job(job, self.namespace)
            except ApiException as error:
                if (
                    error.status == 404
                    and not self.op.client.list_namespaced_pod(
                        self.namespace, label_selector=f"{JOB_LABEL}={job}"
                    ).items
                ):
                    break
            time.sleep(0.5)
        self._followers.clear()

    def _remove_earlier_tries(self, context: Context) -> None:
        """A try that died with its worker left its Job running: it goes before this try creates one."""
        labels = self.op._get_ti_pod_labels(context, include_try_number=False)
        selector = ",".join(f"{k}={v}" for k, v in labels.items() if k != "kubernetes_pod_operator")
        for found in self.jobs.list_namespaced_job(self.namespace, label_selector=selector).items:
            self.log.warning("Deleting training Job %s left by an earlier try", found.metadata.name)
            self._delete(found.metadata.name)

    def on_kill(self) -> None:
        self._killed.set()
        for follower in list(self._followers.values()):
            follower.stop()
        self._delete(self.job, wait=False)
