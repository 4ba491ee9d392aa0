"""The emulated control plane: objects, the scheduler loop, the kubelet and fault injection.

Everything here runs on one asyncio event loop (the server's); the thread-safe front door is
``KubernetesEmulator`` in ``emulator.py``. The Job controller (``job_controller.py``) and the
garbage collector (``deletion.py``) follow the store's events on the same loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow_gpu.testing.images import ImageSet
from airflow_gpu.testing.kubernetes import admission, config_data, dns, pod_security, services, volumes
from airflow_gpu.testing.kubernetes.api_faults import ApiFaults
from airflow_gpu.testing.kubernetes.cluster import ClusterSpec, NodeSpec
from airflow_gpu.testing.kubernetes.container_start import START_ERROR_REASON
from airflow_gpu.testing.kubernetes.deletion import DeleteOptions, GarbageCollector, deletion_status
from airflow_gpu.testing.kubernetes.device_plugin import DevicePlugin
from airflow_gpu.testing.kubernetes.images import ImageRegistry, wait_for_images
from airflow_gpu.testing.kubernetes.job_controller import DEFAULT_BACKOFF_SECONDS, JobController
from airflow_gpu.testing.kubernetes.job_spec import default_job, job_invalid, validate_job, validate_job_update
from airflow_gpu.testing.kubernetes.kubelet import PodRun, container_id, container_status, simulation
from airflow_gpu.testing.kubernetes.objects import (
    bad_request,
    invalid,
    name_from_generate_name,
    new_uid,
    now,
    timestamp,
    validate_pod,
)
from airflow_gpu.testing.kubernetes.phase_clock import PhaseClock
from airflow_gpu.testing.kubernetes.scheduler_cache import SchedulerCache
from airflow_gpu.testing.kubernetes.service_accounts import ServiceAccountController, admit_pod
from airflow_gpu.testing.kubernetes.store import Obj, Store
from airflow_gpu.testing.kubernetes.system_objects import KubernetesServiceController, RootCAPublisher
from airflow_gpu.testing.kubernetes.webhooks import Webhooks

NODE_SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
DEFAULT_GRACE_SECONDS = 30

# The kubelet eviction manager's messages (pkg/kubelet/eviction/helpers.go); each piece ends in
# ". ", trailing space included, and ``status.message`` is their concatenation.
NODE_LOW_MESSAGE = "The node was low on resource: {resource}. "  # nodeLowMessageFmt
THRESHOLD_MET_MESSAGE = "Threshold quantity: {threshold}, available: {available}. "  # thresholdMetMessageFmt
CONTAINER_USAGE_MESSAGE = (  # containerMessageFmt
    "Container {container} was using {usage}, request is {request}, has larger consumption of {resource}. "
)
POD_EPHEMERAL_STORAGE_MESSAGE = (  # podEphemeralStorageMessageFmt
    "Pod ephemeral local storage usage exceeds the total limit of containers {limit}. "
)
CONTAINER_EPHEMERAL_STORAGE_MESSAGE = (  # containerEphemeralStorageMessageFmt (Go %q)
    'Container {container} exceeded its local ephemeral storage limit "{limit}". '
)
EMPTYDIR_MESSAGE = 'Usage of EmptyDir volume "{volume}" exceeds the limit "{limit}". '  # emptyDirMessageFmt
#: eviction_manager.go immediateEvictionGracePeriodSeconds: the grace of a hard-threshold or
#: local-storage eviction (the docs say "0s (immediate shutdown)"; the source gives 1 s).
IMMEDIATE_EVICTION_GRACE_SECONDS = 1
#: Default eviction thresholds (kubelet ``evictionHard``) and an observation below them.
DEFAULT_THRESHOLDS = {"memory": ("100Mi", "50Mi"), "ephemeral-storage": ("10Gi", "4Gi")}


def _condition(kind: str, status: str, reason: str | None = None, message: str | None = None) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": timestamp(),
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def pod_address(number: int) -> str:
    """The ``number``-th pod IP: 10.244.0.2 on, 250 to a /24, valid past 64,000 pods."""
    block = number // 250
    return f"10.{244 + block // 256}.{block % 256}.{number % 250 + 2}"


def set_condition(pod: Obj, condition: dict[str, Any]) -> None:
    conditions = [c for c in pod["status"].get("conditions") or [] if c["type"] != condition["type"]]
    pod["status"]["conditions"] = [*conditions, condition]


class ClusterState:
    def __init__(
        self, cluster: ClusterSpec, api_host: str = "127.0.0.1", job_backoff_seconds: float = DEFAULT_BACKOFF_SECONDS
    ) -> None:
        self.store = Store()
        self.scheduler = SchedulerCache(self.store)  # follows every change from the first
        self.phase_clock = PhaseClock(self.store)
        self.cluster = cluster
        self.api_host = api_host
        self.api_port = 0
        self.runs: dict[tuple[str, str], PodRun] = {}
        self.mount_points: set[Path] = set()  # made on this host for containers' mounts (volumes.py)
        self.faults: list[dict[str, Any]] = []
        self.api_faults = ApiFaults()  # answers the API gives instead of the real one, and request counts
        self.bookmark_seconds = 60.0  # how often a watch that allows bookmarks gets one, as the API server
        self._ip = 0
        self._scheduling = False
        self._tasks: set[asyncio.Task[Any]] = set()
        #: The status the kubelet writes when it ends a pod itself (node shutdown, eviction):
        #: applied as the containers stop, so no one ever sees the pod ``Succeeded`` in between.
        self._final: dict[tuple[str, str], tuple[str, str]] = {}
        #: Deletions in progress (the kubelet's SIGTERM, grace period, removal), by pod.
        self._deleting: dict[tuple[str, str], asyncio.Task[Any]] = {}
        #: The events this cluster's components recorded, by (namespace, object uid, reason, message):
        #: a repeat counts up on the same Event, found without reading every Event of the namespace.
        self._events: dict[tuple[str, str, str, str], str] = {}
        self.service_accounts = ServiceAccountController(self.store)
        self.root_ca = RootCAPublisher(self.store)
        self.images = ImageRegistry(cluster.missing_images)
        #: What declared images hold (``testing.images``): ENTRYPOINT, Cmd, the programs they lack.
        self.image_configs = ImageSet()
        for namespace in ("default", "kube-system", "kube-public"):
            self.store.create(
                "namespaces", "", {"metadata": {"name": namespace}, "spec": {}, "status": {"phase": "Active"}}
            )
            self.service_accounts.ensure_default(namespace)
        self.devices = DevicePlugin()
        for index, node in enumerate(cluster.nodes):
            self.store.create("nodes", "", node.to_node(index))
            self.devices.add_node(node.name, node.accelerator)
        self.addresses = services.Addresses()
        self.kubernetes_service = KubernetesServiceController(self.store, self.addresses)
        self.garbage_collector = GarbageCollector(self)
        self.jobs = JobController(self, job_backoff_seconds)
        self.quotas = admission.QuotaController(self.store)
        #: Validating admission webhooks that deny pods (``webhooks``), declared by tests.
        self.webhooks = Webhooks()

    # --- objects --------------------------------------------------------------------------

    def create_pod(self, namespace: str, pod: Obj) -> Obj:
        self.store.get("namespaces", "", namespace)  # 404 for an unknown namespace, as the API does
        if isinstance(pod.get("spec"), dict):  # mutating admission runs before the registry names and validates
            admit_pod(self.store, namespace, pod)
            admission.admit_pod_mutating(self.store, namespace, pod)
        name_from_generate_name(pod)
        metadata = pod["metadata"]
        causes = validate_pod(pod)
        if causes:
            raise invalid("Pod", str(metadata.get("name") or ""), causes)
        pod_security.admit_pod(self.store, namespace, pod)  # validating, before ResourceQuota, as the chain runs
        # LimitRanger, the validating webhooks, ResourceQuota
        admission.admit_validating(self.store, "pods", namespace, pod, lambda: self.webhooks.admit_pod(namespace, pod))
        spec = pod["spec"]
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            container.setdefault("terminationMessagePath", "/dev/termination-log")  # ``SetDefaults_Container``
            container.setdefault("terminationMessagePolicy", "File")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        created = self.store.create("pods", namespace, pod)
        self.schedule_soon()
        return created

    def create_job(self, namespace: str, job: Obj) -> Obj:
        """The Job registry: defaults, the generated selector, validation; the controller takes it from there."""
        self.store.get("namespaces", "", namespace)
        name_from_generate_name(job)
        job["metadata"]["uid"] = new_uid()  # the generated selector needs it before storing
        default_job(job)
        causes = validate_job(job)
        if causes:
            raise job_invalid(job, causes)
        admission.admit_validating(self.store, "jobs", namespace, job)  # count/jobs.batch
        job["status"] = {}
        return self.store.create("jobs", namespace, job, keep_uid=True)

    def create_service(self, namespace: str, service: Obj) -> Obj:
        self.store.get("namespaces", "", namespace)
        name_from_generate_name(service)
        services.default_service(service)
        causes = services.validate_service(service)
        if causes:
            raise invalid("Service", str(service["metadata"].get("name") or ""), causes)
        admission.admit_validating(self.store, "services", namespace, service)
        if self.store.find("services", namespace, service["metadata"]["name"]) is None:
            self.addresses.allocate(service)
        return self.store.create("services", namespace, service)

    def validate_update(self, plural: str, new: Obj, old: Obj) -> None:
        """The update checks of the kinds with a strategy here (Jobs, Services); 422 when refused."""
        if plural == "jobs":
            default_job(new)
            causes = validate_job_update(new, old)
            if causes:
                raise job_invalid(new, causes)
        elif plural == "services":
            services.default_service(new)
            causes = services.keep_allocated(new, old) + services.validate_service(new)
            if causes:
                raise invalid("Service", old["metadata"]["name"], causes)
        elif plural in config_data.PLURALS:
            causes = config_data.admit(plural, new)
            if causes:
                raise invalid("ConfigMap" if plural == "configmaps" else "Secret", old["metadata"]["name"], causes)

    def record_event(self, obj: Obj, kind: str, reason: str, message: str, component: str) -> None:
        """An Event about ``obj``; a repeat of the same reason and message counts up instead."""
        metadata = obj["metadata"]
        namespace = metadata.get("namespace") or "default"
        key = (namespace, str(metadata.get("uid")), reason, message)
        known = self._events.get(key)
        event = self.store.find("events", namespace, known) if known is not None else None
        if event is not None and event["involvedObject"].get("uid") == metadata.get("uid"):
            event["count"] = event.get("count", 1) + 1
            event["lastTimestamp"] = timestamp()
            self.store.update("events", event)
            return
        name = f"{metadata['name']}.{secrets.token_hex(8)}"
        self._events[key] = name
        self.store.create(
            "events",
            namespace,
            {
                "metadata": {"name": name},
                "involvedObject": {
                    "kind": obj.get("kind"),
                    "namespace": namespace,
                    "name": metadata["name"],
                    "uid": metadata.get("uid"),
                    "apiVersion": obj.get("apiVersion"),
                    "resourceVersion": metadata.get("resourceVersion"),
                },
                "reason": reason,
                "message": message,
                "type": kind,
                "source": {"component": component},
                "reportingComponent": component,
                "firstTimestamp": timestamp(),
                "lastTimestamp": timestamp(),
                "eventTime": None,
                "count": 1,
            },
        )

    # --- scheduler ------------------------------------------------------------------------

    def schedule_soon(self) -> None:
        """Run a scheduling pass on the next loop iteration (coalescing bursts of changes)."""
        if not self._scheduling:
            self._scheduling = True
            asyncio.get_running_loop().call_soon(self._schedule_pending)

    def _schedule_pending(self) -> None:
        self._scheduling = False
        for namespace, name in sorted(self.scheduler.pending):  # in the order a LIST gives them
            pod = self.store.find("pods", namespace, name)
            if pod is None or pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            if pod["status"].get("phase") != "Pending":
                continue
            node_name, message = self.scheduler.schedule(pod)
            if node_name is None:
                current = next((c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)
                if current is None or current.get("message") != message:
                    set_condition(pod, _condition("PodScheduled", "False", "Unschedulable", message))
                    self.store.update("pods", pod)
                    self.record_event(pod, "Warning", "FailedScheduling", message, "default-scheduler")
                continue
            self._bind(pod, node_name)

    def _bind(self, pod: Obj, node_name: str) -> None:
        node = self.store.get("nodes", "", node_name)
        self._ip += 1
        pod["spec"]["nodeName"] = node_name
        pod["status"].update(
            {
                "hostIP": node["status"]["addresses"][0]["address"],
                "podIP": pod_address(self._ip),
                "startTime": timestamp(),
                "containerStatuses": [
                    container_status(c, {"waiting": {"reason": "ContainerCreating"}}) for c in pod["spec"]["containers"]
                ],
            }
        )
        pod["status"]["podIPs"] = [{"ip": pod["status"]["podIP"]}]
        set_condition(pod, _condition("PodScheduled", "True"))
        self.store.update("pods", pod)
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.record_event(
            pod, "Normal", "Scheduled", f"Successfully assigned {namespace}/{name} to {node_name}", "default-scheduler"
        )
        run = PodRun(pod)
        run.gpu_env = self.devices.allocate(pod, node_name, lambda: Path(run.workdir))
        run.resolves = lambda consumer, value: dns.resolves(self.store, consumer, value)
        run.images = self.image_configs
        self.runs[(namespace, name)] = run
        run.task = asyncio.get_running_loop().create_task(self._run_pod(namespace, name, run))

    # --- kubelet --------------------------------------------------------------------------

    def _pod(self, namespace: str, name: str) -> Obj | None:
        return self.store.find("pods", namespace, name)

    def _set_container_state(
        self, namespace: str, name: str, container: dict[str, Any], state: dict[str, Any], init: bool
    ) -> None:
        pod = self._pod(namespace, name)
        if pod is None:
            return
        key = "initContainerStatuses" if init else "containerStatuses"
        statuses = [s for s in pod["status"].get(key) or [] if s["name"] != container["name"]]
        run = self.runs.get((namespace, name))
        process_id = container_id(run.containers[container["name"]]) if run is not None else None
        statuses.append(container_status(container, state, process_id))
        order = [c["name"] for c in pod["spec"].get("initContainers" if init else "containers") or []]
        pod["status"][key] = sorted(statuses, key=lambda s: order.index(s["name"]))
        all_running = not init and all("running" in s["state"] for s in pod["status"]["containerStatuses"])
        if "running" in state and not init:
            pod["status"]["phase"] = "Running"
            for kind in ("Initialized", "ContainersReady", "Ready"):
                if kind != "Initialized" and not all_running:
                    continue
                set_condition(pod, _condition(kind, "True"))
        self.store.update("pods", pod)

    async def _run_pod(self, namespace: str, name: str, run: PodRun) -> None:
        try:
            await self._run_containers(namespace, name, run)
        finally:  # the pod's GPUs are free again once its containers have stopped
            self.devices.release(namespace, name)

    async def _mount_volumes(self, namespace: str, name: str, run: PodRun) -> bool:
        """Make the pod's volumes, retrying while one cannot be made, as the kubelet's volume manager does.

        Meanwhile the containers stay Waiting in ContainerCreating and each failure is a FailedMount
        event. False when the pod went away first.
        """
        pod = self._pod(namespace, name)
        assert pod is not None
        if not run.simulated and not volumes.namespaces_available():
            containers = [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]
            if any(c.get("volumeMounts") for c in containers):
                message = (
                    'MountVolume.SetUp failed for volume "{}" : this machine gives no process its own mount namespace'
                )
                first = (pod["spec"].get("volumes") or [{"name": ""}])[0]["name"]
                self.record_event(pod, "Warning", "FailedMount", message.format(first), "kubelet")
                return False
            return True
        if not run.simulated:  # a simulated pod's volumes are checked, not made: nothing of it is on this host
            run.volumes = volumes.PodVolumes(pod, Path(run.workdir), self.mount_points)
        lookup = self.store.find
        delay = 0.5
        while not run.terminating:
            try:  # in the loop: only the loop reads the store
                if run.volumes is None:
                    volumes.check_volumes(pod, lookup)
                else:
                    run.volumes.prepare(lookup)
                return True
            except volumes.MountError as error:
                current = self._pod(namespace, name)
                if current is None:
                    return False
                self.record_event(current, "Warning", "FailedMount", str(error), "kubelet")
            for _ in range(int(delay * 10)):  # the kubelet's backoff, cut short by a deletion
                if run.terminating:
                    return False
                await asyncio.sleep(0.1)
            delay = min(delay * 2, 4.0)
        return False

    async def _run_containers(self, namespace: str, name: str, run: PodRun) -> None:
        if not await self._mount_volumes(namespace, name, run):
            return
        pod = self._pod(namespace, name)
        if pod is None:
            return
        api = (self.api_host, self.api_port)
        if not await wait_for_images(self, namespace, name, run, pod["spec"].get("initContainers") or [], init=True):
            self._finish(namespace, name, run, init_failed=True)
            return
        for container in pod["spec"].get("initContainers") or []:
            self._set_container_state(namespace, name, container, {"running": {"startedAt": timestamp()}}, init=True)
            state = await run.run_container(copy.deepcopy(pod), container, api)
            self._set_container_state(namespace, name, container, {"terminated": state}, init=True)
            if state["exitCode"] != 0 or run.terminating:
                self._finish(namespace, name, run, init_failed=True)
                return

        async def one(container: dict[str, Any]) -> None:
            current = self._pod(namespace, name) or pod
            if (namespace, name) not in self.images.pulled:  # a slow pull recorded its own ``Pulled``
                self.record_event(
                    current,
                    "Normal",
                    "Pulled",
                    f'Container image "{container.get("image")}" already present on machine',
                    "kubelet",
                )
            self.record_event(current, "Normal", "Created", f"Created container {container['name']}", "kubelet")
            # A simulated container only reads the pod; a process's environment is built from a copy.
            pod_now = current if simulation(container) is not None else copy.deepcopy(current)
            starting = asyncio.get_running_loop().create_task(run.run_container(pod_now, container, api))
            await run.containers[container["name"]].started.wait()
            if not run.containers[container["name"]].finished:
                self.record_event(current, "Normal", "Started", f"Started container {container['name']}", "kubelet")
                self._set_container_state(
                    namespace, name, container, {"running": {"startedAt": timestamp()}}, init=False
                )
            state = await starting
            if state.get("reason") == START_ERROR_REASON:  # the kubelet's FailedToStartContainer
                self.record_event(current, "Warning", "Failed", f"Error: {state.get('message')}", "kubelet")
            self._set_container_state(namespace, name, container, {"terminated": state}, init=False)

        if not run.terminating and await wait_for_images(self, namespace, name, run, pod["spec"]["containers"], False):
            await asyncio.gather(*(one(c) for c in pod["spec"]["containers"]))
        self.images.pulled.discard((namespace, name))
        self._finish(namespace, name, run)

    def _finish(self, namespace: str, name: str, run: PodRun, init_failed: bool = False) -> None:
        pod = self._pod(namespace, name)
        if pod is None:
            return
        codes = [run.containers[n].exit_code for n in run.names]
        final = self._final.get((namespace, name))
        failed = init_failed or final is not None or any(code != 0 for code in codes)
        pod["status"]["phase"] = "Failed" if failed else "Succeeded"
        if final is not None:
            pod["status"]["reason"], pod["status"]["message"] = final
        for kind in ("ContainersReady", "Ready"):
            set_condition(pod, _condition(kind, "False", "PodFailed" if failed else "PodCompleted"))
        self.store.update("pods", pod)
        self.schedule_soon()  # its resources are free again

    async def terminate(
        self,
        namespace: str,
        name: str,
        grace_seconds: float | None = None,
        *,
        delete: bool = True,
        disruption: tuple[str, str] | None = None,
        final: tuple[str, str] | None = None,
    ) -> Obj:
        """Stop a pod the way the kubelet does: SIGTERM, the grace period, SIGKILL.

        ``delete`` removes the object afterwards (a DELETE); otherwise it stays ``Failed`` with
        ``final`` as its reason and message (graceful node shutdown). ``disruption`` adds the
        ``DisruptionTarget`` condition with that reason and message first.
        """
        pod = self.store.get("pods", namespace, name)
        grace = (
            pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
            if grace_seconds is None
            else grace_seconds
        )
        if disruption is not None:
            set_condition(pod, _condition("DisruptionTarget", "True", *disruption))
        if final is not None:
            self._final[(namespace, name)] = final
        if delete and not pod["metadata"].get("deletionTimestamp"):
            self._mark_deleting(pod, grace)
        elif disruption is not None:
            self.store.update("pods", pod)
        run = self.runs.get((namespace, name))
        if run is not None:
            was_running = run.is_running()
            await run.stop(float(grace))
            if run.task is not None:
                await asyncio.shield(run.task)
            if delete:  # a pod left Failed keeps its logs readable, as on a real node
                run.release()
                node = pod["spec"].get("nodeName")
                kept = pod["metadata"].get("finalizers") and node and self.store.find("nodes", "", node) is not None
                if not kept:  # a finalizer keeps the object, and its node its containers' logs, until it goes
                    self.runs.pop((namespace, name), None)
            if pod["spec"].get("nodeName") and was_running:
                self.record_event(pod, "Normal", "Killing", f"Stopping container {', '.join(run.names)}", "kubelet")
        pod = self.store.find("pods", namespace, name) or pod
        if final is not None:
            self._final.pop((namespace, name), None)
            if (pod["status"].get("phase"), pod["status"].get("reason")) != ("Failed", final[0]):
                pod["status"]["phase"] = "Failed"
                pod["status"]["reason"], pod["status"]["message"] = final
                self.store.update("pods", pod)
        if delete:
            return self._delete_now(pod)
        self.schedule_soon()
        return pod

    def _delete_now(self, pod: Obj) -> Obj:
        """The final deletion (the kubelet's, once the containers stopped; the API server's for a pod
        never bound). With finalizers left the pod stays, marked with a zero grace period, until the
        last one is removed (``finalize``). An unbound pod left so is marked ``Failed``, as PodGC does
        with terminating pods that were never scheduled."""
        metadata = pod["metadata"]
        if self.store.find("pods", metadata["namespace"], metadata["name"]) is not pod:
            return pod
        if metadata.get("finalizers"):
            if not pod["spec"].get("nodeName") and pod["status"].get("phase") not in ("Succeeded", "Failed"):
                pod["status"]["phase"] = "Failed"
            metadata["deletionTimestamp"] = min(metadata.get("deletionTimestamp") or timestamp(), timestamp())
            metadata["deletionGracePeriodSeconds"] = 0
            self.store.update("pods", pod)
            self.schedule_soon()
            return pod
        removed = self.store.remove("pods", metadata["namespace"], metadata["name"])
        self.schedule_soon()
        return removed

    def remove_finalizer(self, plural: str, obj: Obj, finalizer: str) -> None:
        """A controller done with its finalizer; the object goes if it was the last of a deletion."""
        finalizers = [f for f in obj["metadata"].get("finalizers") or [] if f != finalizer]
        if finalizers:
            obj["metadata"]["finalizers"] = finalizers
        else:
            obj["metadata"].pop("finalizers", None)
        self.store.update(plural, obj)
        self.finalize(plural, obj)

    def finalize(self, plural: str, obj: Obj) -> None:
        """Remove an object being deleted once no finalizer and no grace period is left."""
        metadata = obj["metadata"]
        key = (plural, metadata.get("namespace", ""), metadata["name"])
        if not metadata.get("deletionTimestamp") or metadata.get("finalizers") or self.store.find(*key) is not obj:
            return
        if metadata.get("deletionGracePeriodSeconds") in (None, 0):
            self.store.remove(*key)
            if plural == "pods":
                self.runs.pop((key[1], key[2]), None)  # its logs, kept while a finalizer kept it
                self.schedule_soon()
            elif plural == "services":
                self.addresses.release(obj)

    def delete_object(self, plural: str, namespace: str, name: str, options: DeleteOptions) -> Obj:
        """DELETE as the generic registry store does it; returns what the API answers."""
        obj = self.store.get(plural, namespace, name)
        options.check_preconditions(plural, obj)
        metadata = obj["metadata"]
        if metadata.get("deletionTimestamp"):  # already being deleted: finalizers are not updated
            return self.delete_pod(namespace, name, options.grace_period_seconds) if plural == "pods" else obj
        finalizers = options.finalizers(plural, list(metadata.get("finalizers") or []))
        if finalizers != list(metadata.get("finalizers") or []):
            if finalizers:
                metadata["finalizers"] = finalizers
            else:
                metadata.pop("finalizers", None)
        if plural == "pods":
            return self.delete_pod(namespace, name, options.grace_period_seconds)
        if finalizers:  # markAsDeleting: the finalizers' owners finish the deletion
            metadata["deletionTimestamp"] = timestamp()
            metadata["deletionGracePeriodSeconds"] = 0
            metadata["generation"] = metadata.get("generation", 1) + 1
            self.store.update(plural, obj)
            return obj
        removed = self.store.remove(plural, namespace, name)
        if plural == "nodes":
            self.schedule_soon()
        elif plural == "services":
            self.addresses.release(removed)
        # Jobs' storage answers a Status; Services' (ReturnDeletedObject) and pods' the object itself.
        return deletion_status(plural, removed) if plural == "jobs" else removed

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None) -> Obj:
        """Start a graceful deletion and answer at once, as the API server does."""
        pod = self.store.get("pods", namespace, name)
        if pod["metadata"].get("deletionTimestamp"):
            return pod
        if (namespace, name) not in self.runs:  # never bound: nothing to stop
            return self._delete_now(pod)
        grace = (
            pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
            if grace_seconds is None
            else grace_seconds
        )
        self._mark_deleting(pod, grace)
        key = (namespace, name)
        task = self.background(self.terminate(namespace, name, grace))
        self._deleting[key] = task

        def forget(done: asyncio.Task[Any]) -> None:
            if self._deleting.get(key) is done:
                del self._deleting[key]

        task.add_done_callback(forget)
        return pod

    async def deleted(self, namespace: str, name: str) -> None:
        """Wait for a deletion in progress to end: with ``gracePeriodSeconds=0`` the API server has
        removed the pod when it answers (finalizers left keep it, marked, as they do there)."""
        deleting = self._deleting.get((namespace, name))
        if deleting is not None:
            await asyncio.shield(deleting)

    def _mark_deleting(self, pod: Obj, grace: float) -> None:
        """What a DELETE answers at once: the pod with ``deletionTimestamp`` set.

        As the API server's ``rest.BeforeDelete`` does, ``deletionTimestamp`` is the time of the
        request plus the grace period: when the object is due to go.
        """
        pod["metadata"]["deletionTimestamp"] = timestamp(now() + timedelta(seconds=float(grace)))
        pod["metadata"]["deletionGracePeriodSeconds"] = int(grace)
        self.store.update("pods", pod)

    def background(self, coroutine: Any) -> asyncio.Task[Any]:
        """Run ``coroutine`` on the loop, keeping a reference so it is not garbage-collected."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- faults ---------------------------------------------------------------------------

    def _record_fault(self, fault: str, **details: Any) -> dict[str, Any]:
        entry = {"fault": fault, "time": now().isoformat(), **details}
        self.faults.append(entry)
        return entry

    async def preempt(self, namespace: str, name: str, grace_seconds: float | None = None) -> dict[str, Any]:
        """A spot reclaim as the kubelet's graceful node shutdown shows it. The shutdown manager stops the
        node's active pods: one that already ended (``Succeeded`` or ``Failed``) keeps its status."""
        pod = self.store.get("pods", namespace, name)
        fault = self._record_fault(
            "preempt", namespace=namespace, pod=name, node=pod["spec"].get("nodeName"), uid=pod["metadata"]["uid"]
        )
        if pod["status"].get("phase") in ("Succeeded", "Failed"):
            fault["ended_before"] = pod["status"]["phase"]
            return fault
        await self.terminate(
            namespace,
            name,
            grace_seconds,
            delete=False,
            disruption=("TerminationByKubelet", NODE_SHUTDOWN_MESSAGE),
            final=("Terminated", NODE_SHUTDOWN_MESSAGE),
        )
        return fault

    async def evict(
        self, namespace: str, name: str, grace_seconds: float | None = None, fault: str | None = None
    ) -> None:
        pod = self.store.get("pods", namespace, name)
        if fault:
            self._record_fault(
                fault, namespace=namespace, pod=name, node=pod["spec"].get("nodeName"), uid=pod["metadata"]["uid"]
            )
        await self.terminate(
            namespace, name, grace_seconds, disruption=("EvictionByEvictionAPI", "Eviction API: evicting")
        )

    async def evict_for_node_pressure(
        self,
        namespace: str,
        name: str,
        resource: str = "memory",
        *,
        threshold: str | None = None,
        available: str | None = None,
        usage: str | None = None,
        max_pod_grace_seconds: float | None = None,
        disruption_condition: bool = True,
    ) -> dict[str, Any]:
        """The kubelet's eviction manager reclaiming ``resource`` on the pod's node.

        As ``eviction_manager.go`` ``synchronize`` and ``evictPod`` do: a Warning event ``Evicted``,
        ``DisruptionTarget`` (``TerminationByKubelet``, the eviction message; Kubernetes >= 1.26,
        ``disruption_condition=False`` for older kubelets), SIGTERM, then SIGKILL after the grace
        period, and the pod left ``Failed`` with reason ``Evicted`` and the eviction message. The
        grace is ``immediateEvictionGracePeriodSeconds`` (1 s) for a hard threshold, whatever the
        pod's ``terminationGracePeriodSeconds``; ``max_pod_grace_seconds`` is a soft threshold's
        ``evictionMaxPodGracePeriod`` (the kubelet only ever shortens a pod's grace period).
        ``usage`` adds the sentence about the first container using more than it requested.
        """
        pod = self.store.get("pods", namespace, name)
        default_threshold, default_available = DEFAULT_THRESHOLDS.get(resource, (None, None))
        threshold = threshold or default_threshold
        available = available or default_available
        message = NODE_LOW_MESSAGE.format(resource=resource)
        if threshold and available:
            message += THRESHOLD_MET_MESSAGE.format(threshold=threshold, available=available)
        if usage is not None:
            container = pod["spec"]["containers"][0]
            request = ((container.get("resources") or {}).get("requests") or {}).get(resource, "0")
            message += CONTAINER_USAGE_MESSAGE.format(
                container=container["name"], usage=usage, request=request, resource=resource
            )
        override = IMMEDIATE_EVICTION_GRACE_SECONDS if max_pod_grace_seconds is None else max_pod_grace_seconds
        return await self._kubelet_evict(
            "evict_for_node_pressure",
            pod,
            message,
            override,
            disruption=("TerminationByKubelet", message) if disruption_condition else None,
            resource=resource,
        )

    async def evict_for_ephemeral_storage(
        self,
        namespace: str,
        name: str,
        limit: str = "1Gi",
        *,
        container: str | None = None,
        volume: str | None = None,
    ) -> dict[str, Any]:
        """The kubelet evicting a pod that exceeded its *own* ephemeral-storage limit.

        ``eviction_manager.go`` ``localStorageEviction``: an emptyDir over its ``sizeLimit``
        (``volume``), a container over its ``limits.ephemeral-storage`` (``container``), or else
        the pod over the sum of its containers' limits. Same path as node pressure (event
        ``Evicted``, SIGTERM, 1 s grace, ``Failed``/``Evicted`` with the message) but without a
        ``DisruptionTarget`` condition: the docs say such a disruption "would reoccur on retry".
        """
        pod = self.store.get("pods", namespace, name)
        if volume is not None:
            message = EMPTYDIR_MESSAGE.format(volume=volume, limit=limit)
        elif container is not None:
            message = CONTAINER_EPHEMERAL_STORAGE_MESSAGE.format(container=container, limit=limit)
        else:
            message = POD_EPHEMERAL_STORAGE_MESSAGE.format(limit=limit)
        return await self._kubelet_evict(
            "evict_for_ephemeral_storage",
            pod,
            message,
            IMMEDIATE_EVICTION_GRACE_SECONDS,
            disruption=None,
            limit=limit,
            container=container,
            volume=volume,
        )

    async def _kubelet_evict(
        self,
        fault: str,
        pod: Obj,
        message: str,
        grace_override: float,
        disruption: tuple[str, str] | None,
        **details: Any,
    ) -> dict[str, Any]:
        metadata = pod["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        entry = self._record_fault(
            fault, namespace=namespace, pod=name, node=pod["spec"].get("nodeName"), uid=metadata["uid"],
            message=message, **details,
        )  # fmt: skip
        self.record_event(pod, "Warning", "Evicted", message, "kubelet")
        grace = min(float(pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)), grace_override)
        await self.terminate(namespace, name, grace, delete=False, disruption=disruption, final=("Evicted", message))
        return entry

    async def delete_by_person(self, namespace: str, name: str, grace_seconds: int | None = None) -> dict[str, Any]:
        """``kubectl delete pod``: a graceful DELETE through the API, and wait until the pod is gone.

        Exactly the API's DELETE (``delete_pod``): ``deletionTimestamp`` and
        ``deletionGracePeriodSeconds`` set, no ``DisruptionTarget`` condition, SIGTERM, SIGKILL
        after the grace period (the pod's ``terminationGracePeriodSeconds`` unless
        ``grace_seconds``), then the object is removed.
        """
        pod = self.store.get("pods", namespace, name)
        entry = self._record_fault(
            "delete_by_person", namespace=namespace, pod=name, node=pod["spec"].get("nodeName"),
            uid=pod["metadata"]["uid"], grace_seconds=grace_seconds,
        )  # fmt: skip
        self.delete_pod(namespace, name, grace_seconds)
        deleting = self._deleting.get((namespace, name))
        if deleting is not None:
            await asyncio.shield(deleting)
        for _ in range(3000):  # as kubectl waits: a finalizer (a Job's) may hold the pod a moment more
            current = self.store.find("pods", namespace, name)
            if current is None or current["metadata"]["uid"] != pod["metadata"]["uid"]:
                break
            await asyncio.sleep(0.01)
        return entry

    async def delete_by_pod_gc(self, namespace: str, name: str) -> dict[str, Any]:
        """PodGC deleting a pod whose node is gone (a reclaimed spot node), as ``gc_controller.go``
        ``markFailedAndDeletePodWithCondition`` does: a pod not yet ended is first marked ``Failed`` with
        ``DisruptionTarget`` (``DeletionByPodGC``, "PodGC: node no longer exists"); a ``Succeeded`` or
        ``Failed`` one is left as it is; then a DELETE with grace period 0. Its logs go with it."""
        pod = self.store.get("pods", namespace, name)
        entry = self._record_fault(
            "pod_gc", namespace=namespace, pod=name, node=pod["spec"].get("nodeName"), uid=pod["metadata"]["uid"],
            phase=pod["status"].get("phase"),
        )  # fmt: skip
        ended = pod["status"].get("phase") in ("Succeeded", "Failed")
        disruption = None if ended else ("DeletionByPodGC", "PodGC: node no longer exists")
        await self.terminate(namespace, name, 0, disruption=disruption)
        return entry

    def printed(self, namespace: str, text: str) -> list[str]:
        """The pods of ``namespace`` on a node whose containers printed a line containing ``text``."""
        return sorted(
            name
            for (space, name), run in self.runs.items()
            if space == namespace and any(text in line for c in run.containers.values() for _, line in c.lines)
        )

    def finish(self, namespace: str, name: str, exit_code: int = 0) -> list[str]:
        """End the pod's simulated containers now with ``exit_code``, as its workload finishing: the
        pod then ends as it would have at the end of ``SIMULATED_SECONDS``. Not a fault: nothing is
        recorded. 400 for a pod with no simulated container, or not on a node yet."""
        self.store.get("pods", namespace, name)
        run = self.runs.get((namespace, name))
        if run is None or not run.simulated_names:
            what = "has no simulated container" if run is not None else "is not on a node yet"
            raise bad_request(f"pod {namespace}/{name} {what}: only a simulated container can be finished")
        return run.finish(exit_code)

    def cordon(self, node_name: str, unschedulable: bool = True) -> Obj:
        node = self.store.get("nodes", "", node_name)
        node["spec"]["unschedulable"] = unschedulable
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != "node.kubernetes.io/unschedulable"]
        if unschedulable:
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": timestamp()})
        node["spec"]["taints"] = taints
        self._record_fault("cordon" if unschedulable else "uncordon", node=node_name)
        self.store.update("nodes", node, spec_changed=True)
        self.schedule_soon()
        return node

    async def drain(self, node_name: str) -> list[str]:
        self.cordon(node_name)
        self._record_fault("drain", node=node_name)
        pods = self.store.list("pods", matches=lambda p: p["spec"].get("nodeName") == node_name)
        names = [p["metadata"]["name"] for p in pods]
        await asyncio.gather(
            *(self.evict(p["metadata"]["namespace"], p["metadata"]["name"], fault="evict") for p in pods)
        )
        return names

    async def remove_node(self, node_name: str) -> list[str]:
        """Capacity loss: the node goes away and pod garbage collection deletes its pods."""
        self.store.get("nodes", "", node_name)
        self._record_fault("remove_node", node=node_name)
        self.store.remove("nodes", "", node_name)
        pods = self.store.list("pods", matches=lambda p: p["spec"].get("nodeName") == node_name)
        await asyncio.gather(
            *(
                self.terminate(
                    p["metadata"]["namespace"], p["metadata"]["name"], 0,
                    disruption=None if p["status"].get("phase") in ("Succeeded", "Failed")
                    else ("DeletionByPodGC", "PodGC: node no longer exists"),
                )  # as ``delete_by_pod_gc``: an ended pod is deleted as it is
                for p in pods
            )
        )  # fmt: skip
        return [p["metadata"]["name"] for p in pods]

    def add_node(self, node: NodeSpec) -> Obj:
        created = self.store.create("nodes", "", node.to_node(len(self.store.list("nodes"))))
        self.devices.add_node(node.name, node.accelerator)
        self._record_fault("add_node", node=node.name)
        self.schedule_soon()
        return created

    async def shutdown(self) -> None:
        """Kill every process the kubelet started (the emulator is going away)."""
        for (namespace, name), run in list(self.runs.items()):
            await run.stop(0)
            if run.task is not None:
                run.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await run.task
            run.release()
            self.runs.pop((namespace, name), None)
        # The mount points made on this host stay (empty): removing one would detach that path in
        # every other emulator's containers too (Linux detaches mounts on rmdir since 3.18).
        self.store.stop_all_watches()
