"""How a GPU trigger reaches its cluster, and the few calls it makes there besides the shared watch.

``ClusterConnection`` holds KPO's connection fields, so that the triggerer reads a cluster as the
worker did. The calls are what a trigger that carries a spot run needs: create a workload (pod,
training Job, Service) and adopt it on 409 when its labels name the same task try (never another
task's), delete one, list a task try's objects, read a node's fate and a pod's log tail. Each
is one request, retried as cncf-kubernetes retries its own (``generic_api_retry``: 429, 5xx and
connection errors); none is made per poll.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Connection extras that name a kubeconfig, and their old prefix.
KUBECONFIG_EXTRAS, EXTRA_PREFIX = frozenset({"kube_config_path"}), "extra__kubernetes__"
#: The API class and method suffix of each kind a trigger creates or deletes.
CALLS = {
    "pods": ("CoreV1Api", "namespaced_pod"),
    "services": ("CoreV1Api", "namespaced_service"),
    "jobs": ("BatchV1Api", "namespaced_job"),
}


@dataclass(frozen=True)
class ClusterConnection:
    """How a trigger reaches its cluster: KPO's fields, so both read a connection alike."""

    kubernetes_conn_id: str | None = None
    connection_extras: Mapping[str, Any] | None = None
    cluster_context: str | None = None
    config_dict: Mapping[str, Any] | None = None
    in_cluster: bool | None = None

    @property
    def key(self) -> str:
        """Identity of the cluster for sharing: the same fields share one watch."""
        return json.dumps(
            [self.kubernetes_conn_id, self.connection_extras, self.cluster_context, self.config_dict, self.in_cluster],
            sort_keys=True,
            default=str,
        )

    def hook(self) -> Any:
        """The async hook, reading the cluster as the worker's sync hook did.

        The operator's ``config_file`` (here ``config_dict``) replaces the connection's
        ``kube_config_path``, as in ``KubernetesHook.get_conn``; ``AsyncKubernetesHook`` instead
        refuses the pair as "mutually exclusive", which fails the official trigger of a KPO with
        ``config_file`` whose connection also names a kubeconfig file. That field is dropped then.
        """
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        extras = dict(self.connection_extras) if self.connection_extras is not None else None
        if self.config_dict:
            extras = {k: v for k, v in (extras or {}).items() if k.removeprefix(EXTRA_PREFIX) not in KUBECONFIG_EXTRAS}
        return AsyncKubernetesHook(
            conn_id=self.kubernetes_conn_id,
            in_cluster=self.in_cluster,
            config_dict=dict(self.config_dict) if self.config_dict else None,
            cluster_context=self.cluster_context,
            connection_extras=extras,
        )


def _api(client: Any, kind: str) -> tuple[Any, str]:
    import kubernetes_asyncio.client as clients

    api_class, suffix = CALLS[kind]
    return getattr(clients, api_class)(client), suffix


async def create_or_adopt(connection: ClusterConnection, kind: str, namespace: str, manifest: dict[str, Any]) -> bool:
    """Create the object; True when one of that name existed already as this task try's (adopted).

    One that belongs to anything else is an error (``NotThisTaskTry``): it is never taken over.
    """
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import generic_api_retry
    from kubernetes_asyncio.client.exceptions import ApiException

    from airflow_gpu.triggers.pod_replacement import same_task_try

    name = manifest["metadata"]["name"]

    @generic_api_retry  # type: ignore[untyped-decorator]
    async def create() -> bool:
        async with connection.hook().get_conn() as client:
            api, suffix = _api(client, kind)  # a dict body is sent as it is; no model needed
            try:
                await getattr(api, f"create_{suffix}")(namespace, manifest)
                return False
            except ApiException as error:
                if error.status != 409:
                    raise
            response = await getattr(api, f"read_{suffix}")(name, namespace, _preload_content=False)
            existing = json.loads(await response.read())
        why_not = same_task_try(existing, manifest)
        if why_not:
            raise NotThisTaskTry(f"{kind[:-1]} {namespace}/{name} exists and is not this task try's: {why_not}")
        return True

    adopted: bool = await create()
    return adopted


class NotThisTaskTry(Exception):
    """An object of the name this task try would create belongs to something else."""


async def delete(connection: ClusterConnection, kind: str, namespace: str, name: str, **options: Any) -> None:
    """Delete the object (``options``: ``propagation_policy``, ``grace_period_seconds``); gone already is fine."""
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import generic_api_retry
    from kubernetes_asyncio.client.exceptions import ApiException

    @generic_api_retry  # type: ignore[untyped-decorator]
    async def call() -> None:
        async with connection.hook().get_conn() as client:
            api, suffix = _api(client, kind)
            try:
                await getattr(api, f"delete_{suffix}")(name, namespace, **options)
            except ApiException as error:
                if error.status != 404:
                    raise

    await call()


async def list_objects(connection: ClusterConnection, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The objects of ``kind`` matching the label selector, as API dicts: one LIST."""
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import generic_api_retry

    from airflow_gpu.triggers.kubernetes_api import checked

    @generic_api_retry  # type: ignore[untyped-decorator]
    async def call() -> list[dict[str, Any]]:
        async with connection.hook().get_conn() as client:
            api, suffix = _api(client, kind)
            listing = getattr(api, f"list_{suffix}")
            response = await checked(await listing(namespace, label_selector=selector, _preload_content=False))
            items: list[dict[str, Any]] = json.loads(await response.read()).get("items") or []
            return items

    found: list[dict[str, Any]] = await call()
    return found


async def node_stays(connection: ClusterConnection, node: str | None) -> bool | None:
    """Whether the node is there to stay (``classifier.classify_deleted_pod``); None if it cannot be told
    (no node, or no ``get nodes``)."""
    from kubernetes_asyncio.client import CoreV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    from airflow_gpu.spot.classifier import node_stays as stays

    if not node:
        return None
    try:
        async with connection.hook().get_conn() as client:
            response: Any = await CoreV1Api(client).read_node(node, _preload_content=False)
            if response.status == 404:
                return False
            if response.status >= 400:
                return None
            return stays(json.loads(await response.read()))
    except ApiException as error:
        return False if error.status == 404 else None


async def pod_log_tail(connection: ClusterConnection, namespace: str, name: str, container: str, lines: int) -> str:
    """The last ``lines`` lines of a container's log; raises when it cannot be read."""
    from kubernetes_asyncio.client import CoreV1Api

    from airflow_gpu.triggers.kubernetes_api import checked

    async with connection.hook().get_conn() as client:
        response: Any = await CoreV1Api(client).read_namespaced_pod_log(
            name, namespace, container=container, tail_lines=lines, _preload_content=False
        )
        response = await checked(response)
        text: str = (await response.read()).decode("utf-8", "replace")
        return text
