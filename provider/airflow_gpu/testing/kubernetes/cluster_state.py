"""The emulated control plane: objects, the scheduler loop, the kubelet and fault injection.

Everything here runs on one asyncio event loop (the server's); the thread-safe front door is
``KubernetesEmulator`` in ``emulator.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import secrets
import shutil
from typing import Any

from airflow_gpu.testing.kubernetes.cluster import ClusterSpec, NodeSpec
from airflow_gpu.testing.kubernetes.kubelet import PodRun, container_id, container_status
from airflow_gpu.testing.kubernetes.objects import invalid, now, timestamp, validate_pod
from airflow_gpu.testing.kubernetes.scheduler import schedule
from airflow_gpu.testing.kubernetes.store import Obj, Store

NODE_SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
DEFAULT_GRACE_SECONDS = 30


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


def set_condition(pod: Obj, condition: dict[str, Any]) -> None:
    conditions = [c for c in pod["status"].get("conditions") or [] if c["type"] != condition["type"]]
    pod["status"]["conditions"] = [*conditions, condition]


class ClusterState:
    def __init__(self, cluster: ClusterSpec, api_host: str = "127.0.0.1") -> None:
        self.store = Store()
        self.cluster = cluster
        self.api_host = api_host
        self.api_port = 0
        self.runs: dict[tuple[str, str], PodRun] = {}
        self.faults: list[dict[str, Any]] = []
        self._ip = 0
        self._scheduling = False
        self._tasks: set[asyncio.Task[Any]] = set()
        for namespace in ("default", "kube-system", "kube-public"):
            self.store.create(
                "namespaces", "", {"metadata": {"name": namespace}, "spec": {}, "status": {"phase": "Active"}}
            )
        for index, node in enumerate(cluster.nodes):
            self.store.create("nodes", "", node.to_node(index))

    # --- objects --------------------------------------------------------------------------

    def create_pod(self, namespace: str, pod: Obj) -> Obj:
        self.store.get("namespaces", "", namespace)  # 404 for an unknown namespace, as the API does
        metadata = pod.setdefault("metadata", {})
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = f"{metadata['generateName']}{secrets.token_hex(3)[:5]}"
        causes = validate_pod(pod)
        if causes:
            raise invalid("Pod", str(metadata.get("name") or ""), causes)
        spec = pod["spec"]
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("serviceAccountName", "default")
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        created = self.store.create("pods", namespace, pod)
        self.schedule_soon()
        return created

    def record_event(self, obj: Obj, kind: str, reason: str, message: str, component: str) -> None:
        """An Event about ``obj``; a repeat of the same reason and message counts up instead."""
        metadata = obj["metadata"]
        namespace = metadata.get("namespace") or "default"
        for event in self.store.list("events", namespace):
            involved = event["involvedObject"]
            if involved.get("uid") == metadata.get("uid") and event["reason"] == reason and event["message"] == message:
                event["count"] = event.get("count", 1) + 1
                event["lastTimestamp"] = timestamp()
                self.store.update("events", event)
                return
        self.store.create(
            "events",
            namespace,
            {
                "metadata": {"name": f"{metadata['name']}.{secrets.token_hex(8)}"},
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
        nodes = self.store.list("nodes")
        for pod in self.store.list("pods", matches=lambda p: not p["spec"].get("nodeName")):
            if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") != "Pending":
                continue
            node_name, message = schedule(pod, nodes, self.store.list("pods"))
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
                "podIP": f"10.244.{self._ip // 250}.{self._ip % 250 + 2}",
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
        pod = self._pod(namespace, name)
        assert pod is not None
        api = (self.api_host, self.api_port)
        for container in pod["spec"].get("initContainers") or []:
            self._set_container_state(namespace, name, container, {"running": {"startedAt": timestamp()}}, init=True)
            state = await run.run_container(copy.deepcopy(pod), container, api)
            self._set_container_state(namespace, name, container, {"terminated": state}, init=True)
            if state["exitCode"] != 0 or run.terminating:
                self._finish(namespace, name, run, init_failed=True)
                return

        async def one(container: dict[str, Any]) -> None:
            current = self._pod(namespace, name) or pod
            self.record_event(
                current,
                "Normal",
                "Pulled",
                f'Container image "{container.get("image")}" already present on machine',
                "kubelet",
            )
            self.record_event(current, "Normal", "Created", f"Created container {container['name']}", "kubelet")
            starting = asyncio.get_running_loop().create_task(run.run_container(copy.deepcopy(current), container, api))
            await run.containers[container["name"]].started.wait()
            if not run.containers[container["name"]].finished:
                self.record_event(current, "Normal", "Started", f"Started container {container['name']}", "kubelet")
                self._set_container_state(
                    namespace, name, container, {"running": {"startedAt": timestamp()}}, init=False
                )
            state = await starting
            self._set_container_state(namespace, name, container, {"terminated": state}, init=False)

        if not run.terminating:
            await asyncio.gather(*(one(c) for c in pod["spec"]["containers"]))
        self._finish(namespace, name, run)

    def _finish(self, namespace: str, name: str, run: PodRun, init_failed: bool = False) -> None:
        pod = self._pod(namespace, name)
        if pod is None:
            return
        codes = [run.containers[n].exit_code for n in run.names]
        failed = init_failed or any(code != 0 for code in codes)
        pod["status"]["phase"] = "Failed" if failed else "Succeeded"
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
        if delete and not pod["metadata"].get("deletionTimestamp"):
            self._mark_deleting(pod, grace)
        elif disruption is not None:
            self.store.update("pods", pod)
        run = self.runs.get((namespace, name))
        if run is not None:
            was_running = bool(run.running_processes())
            await run.stop(float(grace))
            if run.task is not None:
                await asyncio.shield(run.task)
            if delete:  # a pod left Failed keeps its logs readable, as on a real node
                self.runs.pop((namespace, name), None)
                shutil.rmtree(run.workdir, ignore_errors=True)
            if pod["spec"].get("nodeName") and was_running:
                self.record_event(pod, "Normal", "Killing", f"Stopping container {', '.join(run.names)}", "kubelet")
        pod = self.store.find("pods", namespace, name) or pod
        if final is not None:
            pod["status"]["phase"] = "Failed"
            pod["status"]["reason"], pod["status"]["message"] = final
            self.store.update("pods", pod)
        if delete:
            removed = self.store.remove("pods", namespace, name)
            self.schedule_soon()
            return removed
        self.schedule_soon()
        return pod

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None) -> Obj:
        """Start a graceful deletion and answer at once, as the API server does."""
        pod = self.store.get("pods", namespace, name)
        if pod["metadata"].get("deletionTimestamp"):
            return pod
        if (namespace, name) not in self.runs:  # never bound: nothing to stop
            removed = self.store.remove("pods", namespace, name)
            self.schedule_soon()
            return removed
        grace = (
            pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
            if grace_seconds is None
            else grace_seconds
        )
        self._mark_deleting(pod, grace)
        self.background(self.terminate(namespace, name, grace))
        return pod

    def _mark_deleting(self, pod: Obj, grace: float) -> None:
        """What a DELETE answers at once: the pod with ``deletionTimestamp`` set."""
        pod["metadata"]["deletionTimestamp"] = timestamp()
        pod["metadata"]["deletionGracePeriodSeconds"] = int(grace)
        self.store.update("pods", pod)

    def background(self, coroutine: Any) -> None:
        """Run ``coroutine`` on the loop, keeping a reference so it is not garbage-collected."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- faults ---------------------------------------------------------------------------

    def _record_fault(self, fault: str, **details: Any) -> dict[str, Any]:
        entry = {"fault": fault, "time": now().isoformat(), **details}
        self.faults.append(entry)
        return entry

    async def preempt(self, namespace: str, name: str, grace_seconds: float | None = None) -> dict[str, Any]:
        """A spot reclaim as the kubelet's graceful node shutdown shows it."""
        pod = self.store.get("pods", namespace, name)
        fault = self._record_fault(
            "preempt", namespace=namespace, pod=name, node=pod["spec"].get("nodeName"), uid=pod["metadata"]["uid"]
        )
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
                    disruption=("DeletionByPodGC", "PodGC: node no longer exists"),
                )
                for p in pods
            )
        )  # fmt: skip
        return [p["metadata"]["name"] for p in pods]

    def add_node(self, node: NodeSpec) -> Obj:
        created = self.store.create("nodes", "", node.to_node(len(self.store.list("nodes")) + 10))
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
            shutil.rmtree(run.workdir, ignore_errors=True)
            self.runs.pop((namespace, name), None)
        self.store.stop_all_watches()
