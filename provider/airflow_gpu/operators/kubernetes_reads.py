"""What ``GPUKubernetesOperator`` asks the cluster about a pod that ended, through KPO's (sync) client.

The operator classifies an ended pod (``spot.classifier``) and the spot run decides; the facts it
decides from are read here, each a request or two, none per poll: the pod as it is now (gone: a
reclaim, or a person's delete), whether its node is there to stay (a throttled or failed read is
asked again, since "cannot tell" counts as a reclaim), the base container's log (result line and
GPU profile), the node's instance and capacity type (for the cost), the cluster's GPUs (for the
message of a pod that never got any), and the delete of a pod left pending.

Every read is asked again while the API server throttles (429, honouring ``Retry-After``), fails
(5xx) or drops the connection, for minutes (``utils.api_retry``): a pod read that failed would end
the task, a log read that failed would lose its result. ``RetryingPodManager`` does the same for
KPO's own calls, which cncf-kubernetes gives up after 5 tries (about 15 s), and creates a pod
without re-sending on ``409``: the operator adopts a pod its lost create made.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import PodLaunchFailedException
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodManager
from airflow.sdk.exceptions import AirflowException
from kubernetes.client import models as k8s
from kubernetes.client.exceptions import ApiException

from airflow_gpu.hooks.kubernetes import GPUKubernetesHook, cluster_gpu_capacity, node_capacity_type
from airflow_gpu.operators.orphaned_try import WatchedLogs
from airflow_gpu.profiling import termination
from airflow_gpu.profiling.marker import MAX_CHUNKS, PROFILE_MARKER
from airflow_gpu.spot.classifier import (
    Classification,
    Outcome,
    classify_deleted_pod,
    classify_pod,
    disrupted_by,
    node_stays,
)
from airflow_gpu.spot.node_access import say_nodes_unreadable
from airflow_gpu.spot.start_failure import missing_program
from airflow_gpu.triggers.pod_replacement import same_task_try
from airflow_gpu.utils import end_hold
from airflow_gpu.utils.api_retry import call
from airflow_gpu.utils.kubernetes import to_dict
from airflow_gpu.utils.results import RESULT_MARKER, WorkloadOutput, read_output
from airflow_gpu.utils.termination_message import terminated_message

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

LOG = logging.getLogger(__name__)
#: Why an ended pod's log was not read, until it is.
UNREAD = "the pod was gone before its log could be read"


class RetryingPodManager(PodManager):
    """KPO's pod manager with its API calls asked again as ``api_retry`` does (a budget of minutes, not 5 tries),
    and a create that is sent once per transient failure, never again on 409 (the operator reads that).

    It also remembers what it saw, for a pod that is gone before the operator reads its end (issue 26: a
    drain deleted a succeeded pod, which was taken for a preemption and run again): each pod as it last
    read it (``last_seen``) and the result lines of the logs it followed (``followed_results``), so the
    operator can tell that the pod had succeeded and still push its result.
    """

    def __init__(self, *args: Any, stop: Callable[[], None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop = stop  # raises once the try is to stop acting (``orphaned_try``): asked at every read
        self._last_seen: dict[str, dict[str, Any]] = {}
        self._followed: list[tuple[str, str]] = []  # (container, result line) of the logs followed
        self._profile_lines: dict[str, deque[str]] = {}  # container -> the last profile marker lines followed

    def last_seen(self, pod: k8s.V1Pod) -> dict[str, Any] | None:
        """The pod as this manager last read it (an API dict); None if it never read it."""
        return self._last_seen.get(_name(pod))

    def followed_results(self, container: str) -> list[str]:
        """The result lines (``RESULT_MARKER``) of ``container``'s log that were followed since ``forget``."""
        return [line for name, line in self._followed if name == container]

    def followed_output(self, container: str) -> WorkloadOutput:
        """What the followed result lines and profile report say, for a pod or log gone before the end was
        read. A last result line that is not JSON counts as none: KPO's follower hands on a line cut off
        when the stream ends, which the workload may have printed whole (no bug of its to fail the task for)."""
        line, end = self._message(container)  # the profiler's own last result line outranks a follow cut short
        results = [line] if line and (end or {}).get("result") == "kept" else self.followed_results(container)
        output = read_output([*results, *self._profile_lines.get(container, ())])
        return WorkloadOutput() if output.result_error is not None else output

    def followed_clean_exit(self, container: str) -> bool:
        """The profiler's end report, followed before the pod was gone, says its command exited 0 with no
        signal and no spot notice: the workload succeeded, whatever deleted the pod before its end was read
        (PodGC, a lost node's pod garbage collection). A deletion while it ran sends SIGTERM to the container,
        which the report lists even when the workload exits 0 on it (a workload that stops on its own on the
        spot-notice file the preStop hook writes reports exit 0 unsignalled, as a Succeeded pod would show);
        without a complete report at the very end of the followed log nothing is known."""
        profile = read_output(self._profile_lines.get(container, ())).profile or self._message(container)[1] or {}
        return profile.get("exit_code") == 0 and not profile.get("signals") and not profile.get("spot_notice")

    def saw(self, pod: dict[str, Any]) -> None:
        """A read of the pod made elsewhere (``ClusterReads``), remembered as this manager's own."""
        self._last_seen[f"{pod['metadata'].get('namespace')}/{pod['metadata'].get('name')}"] = pod

    def _message(self, container: str) -> tuple[str | None, dict[str, Any] | None]:
        """The result line and end the profiler left in ``container``'s termination message, in the pod's
        status (``profiling.termination``): it outlives a log lost with its node."""
        for pod in reversed(self._last_seen.values()):
            result, end = termination.read(terminated_message(pod, container))
            if end is not None:
                return result, end
        return None, None

    def carried(self, container: str, line: str) -> None:
        """A result line the trigger read from ``container``'s log when the pod succeeded (``result_tail``):
        the pod may be deleted before the resumed task can read its log."""
        self._followed.append((container, line))

    def forget(self) -> None:
        """Start a new pod: nothing seen of it yet."""
        self._last_seen.clear()
        self._followed.clear()
        self._profile_lines.clear()

    def _log_message(self, message: str, container_name: str, *args: Any, **kwargs: Any) -> None:
        """KPO's, keeping the result lines and the last profile report's lines: the pod may be gone before
        its log can be read again."""
        for line in message.splitlines():
            if line.startswith(PROFILE_MARKER):  # a report is MAX_CHUNKS lines at most, and the last one counts
                self._profile_lines.setdefault(container_name, deque(maxlen=MAX_CHUNKS)).append(line)
                continue
            if line.strip():  # a report counts only at the very end of the log, as the strict reader requires
                self._profile_lines.pop(container_name, None)
            if line.startswith(RESULT_MARKER):
                self._followed.append((container_name, line))
        super()._log_message(message, container_name, *args, **kwargs)

    def create_pod(self, pod: k8s.V1Pod) -> k8s.V1Pod:
        created: k8s.V1Pod = call(lambda: self.run_pod_async(pod), f"creating pod {_name(pod)}", log=self.log)
        return created

    def delete_pod(self, pod: k8s.V1Pod) -> None:
        """KPO's delete, then the provider's finalizer removed (``end_hold``): the pod goes when its containers
        have stopped, as without it. A release that fails (an older Role without ``patch``) costs the hold only:
        the delete came first, and ``airflow-gpu reap`` releases what is left."""
        call(lambda: _unwrapped(PodManager.delete_pod)(self, pod), f"deleting pod {_name(pod)}", log=self.log)
        end_hold.release_quietly(self._client, pod.metadata.name, pod.metadata.namespace, self.log)

    _starting = False  # within ``await_pod_start``

    def read_pod(self, pod: k8s.V1Pod) -> k8s.V1Pod:
        if self._stop is not None:  # every wait of KPO's reads the pod
            self._stop()
        read: k8s.V1Pod = call(lambda: _unwrapped(PodManager.read_pod)(self, pod), f"reading pod {_name(pod)}",
                               log=self.log)  # fmt: skip
        self._last_seen[_name(pod)] = to_dict(read)
        if self._starting and read.status is not None and read.status.phase == "Pending":
            for status in read.status.container_statuses or []:  # CRI-O keeps it Pending, retrying for ever
                if program := missing_program(to_dict(read), status.name):
                    raise PodLaunchFailedException(f"container {status.name} cannot start: its image has no {program}")
        return read

    async def await_pod_start(self, pod: k8s.V1Pod, *args: Any, **kwargs: Any) -> None:
        """KPO's wait for the pod to start, which also ends when a container's image lacks its first program."""
        self._starting = True
        try:
            await super().await_pod_start(pod, *args, **kwargs)
        finally:
            self._starting = False

    def read_pod_logs(self, pod: k8s.V1Pod, container_name: str, *args: Any, **kwargs: Any) -> Any:
        """KPO's, and a followed log is shut once the try is orphaned (``orphaned_try.WatchedLogs``)."""
        what = f"reading the log of pod {_name(pod)}"
        logs = call(lambda: _unwrapped(PodManager.read_pod_logs)(self, pod, container_name, *args, **kwargs), what,
                    log=self.log)  # fmt: skip
        if self._stop is None or not kwargs.get("follow", True):
            return logs
        return WatchedLogs(logs, self._stop)

    def read_pod_events(self, pod: k8s.V1Pod, resource_version: str | None = None) -> Any:
        what = f"reading the events of pod {_name(pod)}"
        return call(lambda: _unwrapped(PodManager.read_pod_events)(self, pod, resource_version), what, log=self.log)


def _unwrapped(method: Any) -> Any:
    """The method without cncf-kubernetes' ``generic_api_retry`` (tenacity keeps it as ``__wrapped__``)."""
    return getattr(method, "__wrapped__", method)


def _name(pod: k8s.V1Pod) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


class RetriedLookups:
    """A mixin of ``GPUKubernetesOperator``: KPO's lookups of a pod that ask the API once, asked again as every
    call of the task is (``utils.api_retry``): its label search (``find_pod``; KPO's own retry gives up after a
    few tries) and its read by name (``hook.get_pod``: the pod a resume is for, the pod the task state store
    names for a reattach), where a 503 failed the try (the twenty-fourth soak: a resume's first read)."""

    @cached_property
    def hook(self) -> GPUKubernetesHook:
        op: Any = self
        return GPUKubernetesHook(conn_id=op.kubernetes_conn_id, in_cluster=op.in_cluster,
                                 config_file=op.config_file, cluster_context=op.cluster_context)  # fmt: skip

    def find_pod(self, namespace: str, context: Context, *, exclude_checked: bool = True) -> k8s.V1Pod | None:
        from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

        op: Any = self
        search = getattr(KubernetesPodOperator.find_pod, "__wrapped__", KubernetesPodOperator.find_pod)
        found: k8s.V1Pod | None = call(lambda: search(op, namespace, context, exclude_checked=exclude_checked),
                                       f"listing the pods of task {op.task_id}", log=op.log)  # fmt: skip
        return found


class ClusterReads:
    """The reads about ended pods and their nodes; node facts are kept, a node's labels do not change."""

    def __init__(self, client: Any, manager: RetryingPodManager | None = None) -> None:
        self.client = client
        self.manager = manager  # told of each pod read: its termination message outlives a log lost with its node
        self._nodes: dict[str, tuple[str | None, str | None]] = {}  # node -> (instance type, capacity type)

    def node_stays(self, node: str | None) -> bool | None:  # a drain or reclaim on its way: going
        if not node:
            return None
        try:  # "cannot tell" counts as a reclaim: a throttled or failed read must not
            found = to_dict(call(lambda: self.client.read_node(node), f"reading node {node}", log=LOG))
        except ApiException as error:
            if error.status == 404:
                return False
            if error.status in (401, 403):
                say_nodes_unreadable(LOG, node, error.status)
            return None  # 403 (no `get nodes`), or an API server down past the retry budget: we cannot tell
        return node_stays(found)

    def classify(self, pod: Mapping[str, Any], container: str) -> Classification:
        """``classify_pod``, except for a pod being deleted that ended by the deletion (the provider's finalizer,
        ``utils.end_hold``, keeps it in the API): judged by its node as a pod gone is (``classify_deleted_pod``):
        a node gone is a reclaim, one that stays a deletion through the API, one that cannot be read a reclaim."""
        seen = classify_pod(pod)
        if seen.outcome is Outcome.DELETED and (pod.get("metadata") or {}).get("deletionTimestamp"):
            return classify_deleted_pod(pod, self.node_stays((pod.get("spec") or {}).get("nodeName")), container)
        return seen

    def pod(self, pod: k8s.V1Pod) -> dict[str, Any] | None:
        """The pod as it is now, as an API dict; None once it is gone."""
        try:
            fresh = call(lambda: self.client.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace),
                         f"reading pod {_name(pod)}", log=LOG)  # fmt: skip
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        serialized: dict[str, Any] = to_dict(fresh)
        if self.manager is not None:
            self.manager.saw(serialized)
        return serialized

    def output(self, pod: k8s.V1Pod, container: str) -> tuple[WorkloadOutput | None, str | None]:
        """The result line and the GPU profile the container printed, or why its log could not be read."""
        try:
            response = call(
                lambda: self.client.read_namespaced_pod_log(
                    pod.metadata.name, pod.metadata.namespace, container=container, _preload_content=False
                ),
                f"reading the log of pod {_name(pod)}",
                log=LOG,
            )
        except ApiException as error:  # the pod's outcome stands without its log
            return None, f"its log could not be read ({error.status} {error.reason})"
        except Exception as error:  # a timeout or a dropped connection: the same
            return None, f"its log could not be read ({type(error).__name__}: {error})"
        return read_output(response.data.decode("utf-8", "replace").splitlines()), None

    def node_facts(self, node: str | None) -> tuple[str | None, str | None]:
        """The node's instance type and capacity type (its labels), for the cost: "spot-if-available"
        does not say which the pod got. (None, None) when the node cannot be read."""
        if not node:
            return None, None
        if node not in self._nodes:
            try:
                read = call(lambda: self.client.read_node(node), f"reading node {node}", log=LOG)
                labels = read.metadata.labels or {}
            except ApiException:  # 403 without `get nodes`, 404 once reclaimed: the estimate does without
                self._nodes[node] = (None, None)
            else:
                kind = labels.get("node.kubernetes.io/instance-type") or labels.get("beta.kubernetes.io/instance-type")
                self._nodes[node] = (kind, node_capacity_type(labels))
        return self._nodes[node]

    def delete_and_wait(self, pod: k8s.V1Pod) -> None:
        """Delete the pod now and wait (a minute at most) until it is gone: a pending pod must not start later."""
        with contextlib.suppress(ApiException):
            call(lambda: self.client.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                                           grace_period_seconds=0),
                 f"deleting pod {_name(pod)}", log=LOG)  # fmt: skip
        end_hold.release_quietly(self.client, pod.metadata.name, pod.metadata.namespace, LOG)  # ``pod`` may be bare
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.pod(pod) is not None:
            time.sleep(0.5)

    def capacity_summary(self) -> str:
        """The GPUs the cluster offers, for the message of a pod that got none; empty when it cannot be told."""
        try:
            offered = cluster_gpu_capacity(self.client)  # the client KPO built, config_file included
        except Exception:  # the summary is a courtesy; the failure message stands without it
            return ""
        if not offered:
            return "\nThe cluster offers no GPUs."
        return "\nThe cluster offers:" + "".join(f"\n  - {c}" for c in offered)


def lost_create(op: GPUKubernetesOperator, wanted: k8s.V1Pod, context: Context) -> k8s.V1Pod | None:
    """The pod of the wanted name when this task try made it: a create served whose response was lost (a
    reset after the API server wrote), which the retry then met as 409. None: another's, or gone."""
    namespace, name = wanted.metadata.namespace, wanted.metadata.name
    try:
        found = call(lambda: op.client.read_namespaced_pod(name, namespace), f"reading pod {name}", log=op.log)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    want = to_dict(wanted)
    want["metadata"]["labels"] = {**(want["metadata"].get("labels") or {}), **op._get_ti_pod_labels(context)}
    if same_task_try(to_dict(found), want) is not None or found.metadata.deletion_timestamp is not None:
        return None
    op.log.warning("Pod %s/%s exists and is this try's: its create was served but the answer lost; following it",
                   namespace, name)  # fmt: skip
    if op.reattach_on_restart:
        op._persist_pod_identity_to_task_state_store(context, found)
    return wanted  # KPO follows the pod it asked for, as after its own create


def stopped_on_deletion(outcome: Classification | None, ended: Mapping[str, Any] | None) -> None:
    """Raise for a pod that ended ``Succeeded`` and was classified otherwise (its workload exited 0 on the
    signal of a deletion through the API, a drain's eviction, a reclaim): KPO fails every other phase itself,
    and takes this one for a success. The operator then goes on as the classification says (a failed try, a
    resubmission). Before, only a plain deletion raised: a drain's eviction was recorded as an interruption
    and the task then succeeded without a result (the sixth soak, two shards)."""
    phase = ((ended or {}).get("status") or {}).get("phase")
    if outcome is not None and outcome.outcome is not Outcome.SUCCEEDED and phase == "Succeeded":
        raise AirflowException(f"the pod was deleted while it ran and ended on the deletion ({outcome.message})")


def classify_gone(
    manager: RetryingPodManager, last_seen: Mapping[str, Any] | None, node_exists: bool | None, container: str
) -> Classification:
    """A pod the API no longer has (``classify_deleted_pod``), or SUCCEEDED where the profiler's end report,
    followed with its log, says the workload exited 0 untouched (``followed_clean_exit``): PodGC or a lost
    node's pod garbage collection can delete a completed pod before the operator has seen it complete
    (the soak, seed 463621002: a shard deleted 0.1 s after its success, last seen Running, run again)."""
    seen = classify_deleted_pod(last_seen, node_exists, container)
    unknown_end = last_seen is None or (
        ((last_seen.get("status") or {}).get("phase") in (None, "Pending", "Running"))
        and disrupted_by(last_seen) is None
    )  # a verdict the last state already gave (a failed container, a disruption) stands
    if seen.outcome is not Outcome.SUCCEEDED and unknown_end and manager.followed_clean_exit(container):
        return Classification(Outcome.SUCCEEDED, "Succeeded", exit_code=0)
    return seen
