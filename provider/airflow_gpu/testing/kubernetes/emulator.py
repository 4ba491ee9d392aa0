"""``KubernetesEmulator``: start the API server on a free port, get a kubeconfig, inject faults.

.. code-block:: python

    from airflow_gpu.testing.kubernetes import KubernetesEmulator

    with KubernetesEmulator(cluster="demo") as k8s:
        k8s.write_kubeconfig("kubeconfig")   # or point the kubernetes_default connection at it
        ...
        k8s.preempt("my-pod")                 # a spot reclaim, exactly as a node shows it
        k8s.evict_for_node_pressure("other")  # the kubelet reclaiming memory: not a spot reclaim
        k8s.delete_by_person("third")         # kubectl delete pod
        assert k8s.faults[0]["fault"] == "preempt"

The server runs on its own event loop in a background thread, so the blocking ``kubernetes``
client, ``kubernetes_asyncio`` and Airflow's task runner in the same process all reach it over
real HTTP. Fault methods are thread-safe and block until the fault has played out.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from airflow_gpu.testing.images import Image
from airflow_gpu.testing.kubernetes.api import build_app
from airflow_gpu.testing.kubernetes.api_faults import ApiFault
from airflow_gpu.testing.kubernetes.cluster import ClusterSpec, NodeSpec
from airflow_gpu.testing.kubernetes.cluster_state import ClusterState
from airflow_gpu.testing.kubernetes.job_controller import DEFAULT_BACKOFF_SECONDS
from airflow_gpu.testing.kubernetes.kubeconfig import kubeconfig_text
from airflow_gpu.testing.kubernetes.webhooks import DenyingWebhook

T = TypeVar("T")


class KubernetesEmulator:
    """``job_backoff_seconds`` is the Job controller's first pod-failure back-off (10 s on a cluster,
    doubling per failure, capped at 60 times it): tests shorten it."""

    def __init__(
        self,
        cluster: str | Path | ClusterSpec = "demo",
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        job_backoff_seconds: float = DEFAULT_BACKOFF_SECONDS,
    ) -> None:
        self.spec = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec.load(cluster)
        self.host = host
        self.port = port
        self.job_backoff_seconds = job_backoff_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.state: ClusterState | None = None
        self.kubeconfig_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # --- lifecycle ------------------------------------------------------------------------

    async def start_async(self) -> None:
        """Start serving on the running loop (what the command line uses)."""
        self._loop = asyncio.get_running_loop()
        self.state = ClusterState(self.spec, self.host, self.job_backoff_seconds)
        self._runner = web.AppRunner(build_app(self.state), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self.state.api_port = self.port
        self.state.kubernetes_service.publish(self.host, self.port)

    async def stop_async(self) -> None:
        if self.state is not None:
            await self.state.shutdown()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start(self) -> KubernetesEmulator:
        """Serve from a background thread; returns once the port is listening."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as error:  # reported to the caller below
                errors.append(error)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop_async())
            loop.close()

        self._thread = threading.Thread(target=serve, name="kubernetes-emulator", daemon=True)
        self._thread.start()
        ready.wait(timeout=30)
        if errors:
            raise RuntimeError(f"the Kubernetes emulator did not start: {errors[0]}") from errors[0]
        return self

    def serve_forever(self, kubeconfig: str | Path | None = None, announce: Any = print) -> None:
        """Serve in this thread until SIGINT or SIGTERM, then stop every process started (the CLI)."""
        import signal

        async def main() -> None:
            await self.start_async()
            if kubeconfig is not None:
                self.write_kubeconfig(kubeconfig)
            stopping = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stopping.set)
            announce(self)
            await stopping.wait()
            await self.stop_async()

        asyncio.run(main())

    def stop(self) -> None:
        """Stop every process the kubelet started, then the server."""
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
        self._thread = None

    def __enter__(self) -> KubernetesEmulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 600) -> T:
        assert self._loop is not None, "the emulator is not running"
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def _sync(self, function: Any, *args: Any) -> Any:
        async def call() -> Any:
            return function(*args)

        return self._call(call())

    # --- configuration --------------------------------------------------------------------

    def kubeconfig(self, context: str = "airflow-gpu-emulator") -> str:
        return kubeconfig_text(self.url, context)

    def write_kubeconfig(self, path: str | Path, context: str = "airflow-gpu-emulator") -> Path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.kubeconfig(context))
        self.kubeconfig_path = target
        return target

    # --- faults ---------------------------------------------------------------------------

    def _state(self) -> ClusterState:
        assert self.state is not None, "the emulator is not running"
        return self.state

    def preempt(
        self, pod: str, namespace: str = "default", grace_period_seconds: float | None = None
    ) -> dict[str, Any]:
        """Reclaim the pod's spot node: DisruptionTarget, SIGTERM, grace period, phase Failed."""
        return self._call(self._state().preempt(namespace, pod, grace_period_seconds))

    def evict_for_node_pressure(
        self, pod: str, namespace: str = "default", resource: str = "memory", **options: Any
    ) -> dict[str, Any]:
        """The kubelet evicts the pod to reclaim ``resource``: not a spot reclaim, but resubmittable.

        ``DisruptionTarget`` (``TerminationByKubelet``, unless ``disruption_condition=False`` as
        before Kubernetes 1.26), SIGTERM, 1 s grace (a hard threshold; ``max_pod_grace_seconds``
        for a soft one), then phase ``Failed``, reason ``Evicted``, message "The node was low on
        resource: memory. Threshold quantity: 100Mi, available: 50Mi. ". The pod object stays.

        The keyword ``options`` are ``ClusterState.evict_for_node_pressure``'s: ``threshold``,
        ``available``, ``usage``, ``max_pod_grace_seconds``, ``disruption_condition``.
        """
        return self._call(self._state().evict_for_node_pressure(namespace, pod, resource, **options))

    def evict_for_ephemeral_storage(
        self,
        pod: str,
        namespace: str = "default",
        limit: str = "1Gi",
        *,
        container: str | None = None,
        volume: str | None = None,
    ) -> dict[str, Any]:
        """The kubelet evicts the pod for exceeding its own ephemeral-storage limit (the workload's fault).

        No ``DisruptionTarget``; SIGTERM, 1 s grace, phase ``Failed``, reason ``Evicted`` and the
        kubelet's message for an emptyDir (``volume``), a container (``container``) or the pod.
        """
        return self._call(
            self._state().evict_for_ephemeral_storage(namespace, pod, limit, container=container, volume=volume)
        )

    def delete_by_person(
        self, pod: str, namespace: str = "default", grace_period_seconds: int | None = None
    ) -> dict[str, Any]:
        """``kubectl delete pod``: a graceful DELETE, no ``DisruptionTarget``; returns once the pod is gone."""
        return self._call(self._state().delete_by_person(namespace, pod, grace_period_seconds))

    def delete_by_pod_gc(self, pod: str, namespace: str = "default") -> dict[str, Any]:
        """PodGC's deletion of a pod whose node is gone (a spot node reclaimed and removed): grace period 0,
        ``DisruptionTarget`` ``DeletionByPodGC`` on a pod not yet ended; a completed pod is deleted as it is."""
        return self._call(self._state().delete_by_pod_gc(namespace, pod))

    def slow_pulls(self, seconds: float, times: int = 1, namespace: str | None = None) -> None:
        """The next ``times`` pods (of ``namespace``, or any) to pull their images take ``seconds`` to:
        ``Pulling``, the pod ``Pending`` on its node, then ``Pulled`` (see ``images``)."""
        self._sync(self._state().images.slow_pull, seconds, times, namespace)

    def clear_slow_pulls(self) -> None:
        self._sync(self._state().images.clear_slow_pulls)

    def pulling(self, namespace: str = "default") -> list[str]:
        """The pods of ``namespace`` pulling their images now."""
        pulling = self._sync(lambda: list(self._state().images.pulling))
        return sorted(name for space, name in pulling if space == namespace)

    def printed(self, text: str, namespace: str = "default") -> list[str]:
        """The pods of ``namespace`` whose containers printed a line containing ``text`` (read in-process,
        no API request)."""
        return list(self._sync(self._state().printed, namespace, text))

    def drain(self, node: str) -> list[str]:
        """Cordon the node and evict its pods through the Eviction API."""
        return self._call(self._state().drain(node))

    def cordon(self, node: str, unschedulable: bool = True) -> None:
        self._sync(self._state().cordon, node, unschedulable)

    def remove_node(self, node: str) -> list[str]:
        """Lose the node: its pods are killed and garbage-collected."""
        return self._call(self._state().remove_node(node))

    def add_node(self, node: NodeSpec | dict[str, Any]) -> None:
        spec = node if isinstance(node, NodeSpec) else NodeSpec.from_dict(node)
        self._sync(self._state().add_node, spec)

    def finish(self, *pods: str, namespace: str = "default", exit_code: int = 0) -> dict[str, list[str]]:
        """End the pods' simulated containers now with ``exit_code``: their workloads are done, and
        each pod ends as it would at the end of its ``SIMULATED_SECONDS``. Per pod, the containers
        it ended. Raises ``ApiError`` (400) for a pod with no simulated container or not on a node."""

        async def finish_all() -> dict[str, list[str]]:
            return {pod: self._state().finish(namespace, pod, exit_code) for pod in pods}

        return self._call(finish_all())

    def pod_phase_times(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """When each pod first showed each phase and when it was deleted, as ``time.time()`` values
        to the microsecond (``phase_clock``): what a latency measurement starts from."""
        return list(self._sync(self._state().phase_clock.times, namespace))

    @property
    def faults(self) -> list[dict[str, Any]]:
        """Every fault injected so far, oldest first."""
        return list(self._state().faults)

    def inject_api_fault(self, **rule: Any) -> ApiFault:
        """Answer matching requests with an error, reset them, or cut their stream (see ``ApiFault``).

        ``inject_api_fault(verb="list", resource="pods", status=429, retry_after=2, times=3)``;
        ``inject_api_fault(verb="watch", resource="pods", status=403, times=None)`` (RBAC without
        watch); ``inject_api_fault(resource="pods/log", cut_after=5)`` (a stream dropped mid-way).
        """
        return self._state().api_faults.add(ApiFault(**rule))

    def clear_api_faults(self) -> None:
        self._state().api_faults.clear()

    def declare_image(self, reference: str, image: Image) -> None:
        """What ``reference`` holds, as its registry config and file system say (``testing.images.Image``):
        its containers then run as containerd runs them, and fail to start as it reports (a distroless image
        has no ``/bin/sh``: ``images.distroless()``)."""
        self._state().image_configs.declare(reference, image)

    def deny_pods(
        self,
        webhook: str,
        message: str = "",
        code: int = 403,
        *,
        reason: str = "",
        selector: str | None = None,
        namespace: str | None = None,
    ) -> DenyingWebhook:
        """A validating admission webhook named ``webhook`` denies the pods it matches with ``message`` and
        ``code`` (a policy engine's ``status``), as kube-apiserver reports it: ``pods "x" is forbidden:
        admission webhook "gpu-policy.example.com" denied the request: GPU pods need label team``; a Job's
        pods so denied show it in ``FailedCreate``. ``selector`` is a label selector on the pod (``"!team"``),
        ``namespace`` one namespace; neither given, every pod is denied (see ``webhooks``)."""
        return self._state().webhooks.add(
            DenyingWebhook(webhook, message, code, reason, selector=selector, namespace=namespace)
        )

    def allow_pods(self, webhook: str | None = None) -> None:
        """Remove the denying webhook of that name (``deny_pods``), or every one."""
        self._state().webhooks.remove(webhook)

    def compact_history(self) -> str:
        """Compact the history as etcd does: a watch from an earlier resourceVersion gets ``410 Expired``."""
        return str(self._sync(self._state().store.compact))

    def end_watches(self) -> None:
        """End every open watch cleanly, as an API server that shuts down for an upgrade does."""
        self._sync(self._state().store.stop_all_watches)

    def set_bookmark_interval(self, seconds: float) -> None:
        """How often a watch that allows bookmarks gets one (the API server: about a minute)."""
        self._state().bookmark_seconds = seconds

    def set_short_pages(self, short: bool = True) -> None:
        """Pages of a LIST with a selector hold only the matches among the next ``limit`` objects: fewer
        than ``limit``, none even, with ``continue`` while more follow, as the API's ``limit`` allows
        (a real API server fills them; a client must go by ``continue`` alone)."""
        self._state().store.short_pages = short

    @property
    def api_faults_injected(self) -> list[dict[str, Any]]:
        """Each request a fault hit: its verb, resource, subresource, namespace, name and the answer."""
        return list(self._state().api_faults.injected)

    def api_requests(self, verb: str | None = None, resource: str | None = None, subresource: str | None = None) -> int:
        """Requests served so far, by the verb ``/metrics`` counts (``LIST``, ``WATCH``, ``GET``...)."""
        return self._state().api_faults.total(verb, resource, subresource)
