"""What ``GPUKubernetesOperator`` asks the cluster about a pod that ended, through KPO's (sync) client.

The operator classifies an ended pod (``spot.classifier``) and the spot run decides; the facts it
decides from are read here, each a request or two, none per poll: the pod as it is now (gone: a
reclaim, or a person's delete), whether its node is there to stay (a throttled or failed read is
asked again, since "cannot tell" counts as a reclaim), the base container's log (result line and
GPU profile), the node's instance and capacity type (for the cost), the cluster's GPUs (for the
message of a pod that never got any), and the delete of a pod left pending.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from kubernetes.client import models as k8s
from kubernetes.client.exceptions import ApiException

from airflow_gpu.hooks.kubernetes import cluster_gpu_capacity, node_capacity_type
from airflow_gpu.spot.classifier import node_stays
from airflow_gpu.spot.node_access import say_nodes_unreadable
from airflow_gpu.utils.kubernetes import to_dict
from airflow_gpu.utils.results import WorkloadOutput, read_output

LOG = logging.getLogger(__name__)
#: Statuses worth asking again: throttled (API Priority and Fairness) or a server that failed.
TRANSIENT = (429, 500, 502, 503, 504)


class ClusterReads:
    """The reads about ended pods and their nodes; node facts are kept, a node's labels do not change."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._nodes: dict[str, tuple[str | None, str | None]] = {}  # node -> (instance type, capacity type)

    def node_stays(self, node: str | None) -> bool | None:  # a drain or reclaim on its way: going
        if not node:
            return None
        for attempt in range(3):  # "cannot tell" counts as a reclaim: a throttled or failed read must not
            try:
                found = to_dict(self.client.read_node(node))
            except ApiException as error:
                if error.status == 404:
                    return False
                if error.status in TRANSIENT and attempt < 2:
                    time.sleep(0.5 * (attempt + 1))  # backoff before asking the API server again
                    continue
                if error.status in (401, 403):
                    say_nodes_unreadable(LOG, node, error.status)
                return None  # 403 (no `get nodes`): we cannot tell
            return node_stays(found)
        return None

    def pod(self, pod: k8s.V1Pod) -> dict[str, Any] | None:
        """The pod as it is now, as an API dict; None once it is gone."""
        try:
            fresh = self.client.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        serialized: dict[str, Any] = to_dict(fresh)
        return serialized

    def output(self, pod: k8s.V1Pod, container: str) -> tuple[WorkloadOutput | None, str | None]:
        """The result line and the GPU profile the container printed, or why its log could not be read."""
        try:
            response = self.client.read_namespaced_pod_log(
                pod.metadata.name, pod.metadata.namespace, container=container, _preload_content=False
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
                labels = self.client.read_node(node).metadata.labels or {}
            except ApiException:  # 403 without `get nodes`, 404 once reclaimed: the estimate does without
                self._nodes[node] = (None, None)
            else:
                kind = labels.get("node.kubernetes.io/instance-type") or labels.get("beta.kubernetes.io/instance-type")
                self._nodes[node] = (kind, node_capacity_type(labels))
        return self._nodes[node]

    def delete_and_wait(self, pod: k8s.V1Pod) -> None:
        """Delete the pod now and wait (a minute at most) until it is gone: a pending pod must not start later."""
        with contextlib.suppress(ApiException):
            self.client.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
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
