"""Image pulls: every image "pulls", except those a cluster file declares missing.

A container whose image is declared missing goes through what the kubelet's image manager
(``pkg/kubelet/images/image_manager.go``, Kubernetes 1.33) and containerd show for an image that
does not exist: events ``Pulling`` ("Pulling image "x""), ``Failed`` ("Failed to pull image "x":
rpc error: code = NotFound desc = failed to pull and unpack image ...") and ``Failed`` ("Error:
ErrImagePull"); the container waits with reason ``ErrImagePull`` and the runtime's message; then,
until the back-off (10 s, doubling, at most 300 s) is over, ``BackOff`` ("Back-off pulling image
"x"") and ``Failed`` ("Error: ImagePullBackOff"), the container waiting with reason
``ImagePullBackOff`` and "Back-off pulling image "x": ErrImagePull: <the pull error>" (the
previous error is appended since 1.32). The pod stays ``Pending``. That is what
``KubernetesPodOperator`` reads to fail with "Image cannot be pulled, unable to start: ...".

An image declared to the emulator (``testing.images.Image``: its ENTRYPOINT, Cmd and the programs it
lacks) runs as the kubelet and containerd run it (``container_start.started_argv``): ``command`` replaces the
ENTRYPOINT, ``args`` the Cmd. A first program the image lacks (``/bin/sh`` in a distroless image)
cannot be started: containerd's ``StartContainer`` fails, and the container ends ``terminated`` with
reason ``StartError``, exit code 128, containerd's message (``failed to create containerd task: ...
exec: "/bin/sh": stat /bin/sh: no such file or directory: unknown``) and ``startedAt`` the Unix epoch
(containerd never set a start time); the kubelet records a ``Failed`` event "Error: <message>"
(``kuberuntime_container.go``). With ``restartPolicy: Never`` the pod is ``Failed``.

A pull that takes time (``ImageRegistry.slow_pull``: the next pods to pull wait ``seconds``, as a
node without the image in its cache does for a multi-gigabyte CUDA image) shows what the kubelet
shows meanwhile: the event ``Pulling`` ("Pulling image "x""), the container waiting with reason
``ContainerCreating``, the pod ``Pending`` on its node; then ``Pulled`` ("Successfully pulled image
"x" in 8.002s (8.002s including waiting). Image size: N bytes.", the wording of 1.33's
``image_manager.go``) in place of "already present on machine". A pod stopped while it pulls (a
spot reclaim) never starts its containers. ``ImageRegistry.pulling`` lists the pods pulling now.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_gpu.testing.kubernetes.cluster_state import ClusterState
    from airflow_gpu.testing.kubernetes.kubelet import PodRun

DEFAULT_REGISTRY = "docker.io"
DEFAULT_TAG = "latest"
#: The image back-off of the kubelet (``backOffPeriod`` 10 s, ``MaxContainerBackOff`` 300 s).
BACKOFF_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 300.0
#: How long after a failed pull the kubelet's next sync shows ``ImagePullBackOff``.
BACKOFF_SHOWN_AFTER_SECONDS = 1.0
#: The size a slow pull reports in its ``Pulled`` event (the emulated registry has no layers to count).
PULLED_IMAGE_BYTES = 8_589_934_592


def with_default_tag(image: str) -> str:
    """``applyDefaultImageTag``: ``:latest`` when the reference has neither tag nor digest."""
    last = image.rsplit("/", 1)[-1]
    return image if "@" in image or ":" in last else f"{image}:{DEFAULT_TAG}"


def normalized(image: str) -> str:
    """The fully qualified reference, as ``ParseNormalizedNamed`` makes it (``busybox`` is
    ``docker.io/library/busybox:latest``)."""
    reference = with_default_tag(image)
    first, _, rest = reference.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        path = reference if rest else f"library/{reference}"
        return f"{DEFAULT_REGISTRY}/{path}"
    return reference


def pull_error(image: str) -> str:
    """containerd's answer for a reference that does not exist, as the CRI returns it."""
    full = normalized(image)
    return (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{full}": '
        f'failed to resolve reference "{full}": {full}: not found'
    )


def backoff_message(image: str) -> str:
    """The waiting message of ``ImagePullBackOff``: the back-off and the previous pull error."""
    return f'Back-off pulling image "{image}": ErrImagePull: {pull_error(image)}'


@dataclass
class SlowPull:
    """The next ``times`` pods to pull (of ``namespace``, or any) take ``seconds`` to do it."""

    seconds: float
    times: int
    namespace: str | None = None


class ImageRegistry:
    """The images that exist, as far as the emulated nodes are concerned: all but ``missing``; and
    the pulls that take time (``slow_pull``)."""

    def __init__(self, missing: Iterable[str] = ()) -> None:
        self._missing = {normalized(image) for image in missing}
        self._slow: list[SlowPull] = []
        #: Pods pulling their images now, by (namespace, name), with when the pull began (``time.time()``).
        self.pulling: dict[tuple[str, str], float] = {}
        #: Pods whose images were pulled (not found on the node): no "already present" event for them.
        self.pulled: set[tuple[str, str]] = set()

    def exists(self, image: str) -> bool:
        return normalized(image) not in self._missing

    def slow_pull(self, seconds: float, times: int = 1, namespace: str | None = None) -> SlowPull:
        """The next ``times`` pods (of ``namespace``, or of any) that start pulling take ``seconds``."""
        pull = SlowPull(seconds, times, namespace)
        self._slow.append(pull)
        return pull

    def clear_slow_pulls(self) -> None:
        self._slow.clear()

    def take_slow_pull(self, namespace: str) -> float | None:
        """The seconds this pod's pull takes, spending one armed ``slow_pull``; None: the image is cached."""
        for pull in self._slow:
            if pull.namespace in (None, namespace):
                pull.times -= 1
                if pull.times <= 0:
                    self._slow.remove(pull)
                return pull.seconds
        return None


def next_backoff(current: float) -> float:
    return min(current * 2, MAX_BACKOFF_SECONDS)


async def _sleep_unless_terminating(run: PodRun, seconds: float) -> bool:
    """Wait ``seconds``; False as soon as the pod is being stopped (the kubelet gives up pulling)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not run.terminating:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return True
        await asyncio.sleep(min(remaining, 0.05))
    return False


async def wait_for_images(
    state: ClusterState, namespace: str, name: str, run: PodRun, containers: list[dict[str, Any]], init: bool
) -> bool:
    """True when every image of ``containers`` exists; else pull, fail and back off, as the kubelet
    does, until the pod is stopped (then False: its containers never start)."""
    missing = [c for c in containers if not state.images.exists(str(c.get("image") or ""))]
    backoff = BACKOFF_SECONDS
    while missing and not run.terminating:
        for waiting, wait in (("ErrImagePull", BACKOFF_SHOWN_AFTER_SECONDS), ("ImagePullBackOff", None)):
            pod = state.store.find("pods", namespace, name)
            if pod is None:
                return False
            for container in missing:
                image = str(container.get("image"))
                if waiting == "ErrImagePull":
                    state.record_event(pod, "Normal", "Pulling", f'Pulling image "{image}"', "kubelet")
                    failure = f'Failed to pull image "{image}": {pull_error(image)}'
                    state.record_event(pod, "Warning", "Failed", failure, "kubelet")
                    message = pull_error(image)
                else:
                    state.record_event(pod, "Normal", "BackOff", f'Back-off pulling image "{image}"', "kubelet")
                    message = backoff_message(image)
                state.record_event(pod, "Warning", "Failed", f"Error: {waiting}", "kubelet")
                state._set_container_state(
                    namespace, name, container, {"waiting": {"reason": waiting, "message": message}}, init
                )
            pause = wait if wait is not None else backoff - BACKOFF_SHOWN_AFTER_SECONDS
            if not await _sleep_unless_terminating(run, pause):
                return False
        backoff = next_backoff(backoff)
    if missing:
        return False
    seconds = None if init or not containers else state.images.take_slow_pull(namespace)
    return True if seconds is None else await _pull_slowly(state, namespace, name, run, containers, seconds)


async def _pull_slowly(
    state: ClusterState, namespace: str, name: str, run: PodRun, containers: list[dict[str, Any]], seconds: float
) -> bool:
    """Pull ``containers``' images over ``seconds`` (the containers keep waiting in ``ContainerCreating``);
    False when the pod is stopped meanwhile."""
    pod = state.store.find("pods", namespace, name)
    if pod is None:
        return False
    key = (namespace, name)
    for container in containers:
        state.record_event(pod, "Normal", "Pulling", f'Pulling image "{container.get("image")}"', "kubelet")
    state.images.pulling[key] = time.time()
    try:
        if not await _sleep_unless_terminating(run, seconds):
            return False
    finally:
        state.images.pulling.pop(key, None)
    pod = state.store.find("pods", namespace, name) or pod
    took = f"{seconds:.3f}s"
    for container in containers:
        message = (
            f'Successfully pulled image "{container.get("image")}" in {took} ({took} including waiting). '
            f"Image size: {PULLED_IMAGE_BYTES} bytes."
        )
        state.record_event(pod, "Normal", "Pulled", message, "kubelet")
    state.images.pulled.add(key)
    return True
