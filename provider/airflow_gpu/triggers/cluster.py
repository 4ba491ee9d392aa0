"""How a GPU trigger reaches its cluster, and the few calls it makes there besides the shared watch.

``ClusterConnection`` holds KPO's connection fields, so that the triggerer reads a cluster as the
worker did. The calls are what a trigger that carries a spot run needs: create a workload (pod,
training Job, Service) and adopt it on 409 when its labels name the same task try (never another
task's, nor one being deleted: ``adoption``), give a training Job's Service the Job as owner,
delete one, list a task try's objects, read a node's fate and a pod's log tail. Each is one
request, asked again while the API server throttles (429), fails (5xx) or drops the connection,
for minutes, honouring ``Retry-After`` (``utils.api_retry``); a create whose response was lost
meets its own object (409) and adopts it. None is made per poll. Only waiting out an object
being deleted reads it again, once a second, for a bounded time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_gpu.triggers import adoption
from airflow_gpu.triggers.adoption import NotThisTaskTry as NotThisTaskTry  # raised here, caught by the triggers
from airflow_gpu.triggers.adoption import StillBeingDeleted as StillBeingDeleted
from airflow_gpu.utils import supervisor_requests
from airflow_gpu.utils.api_retry import acall
from airflow_gpu.utils.training_job import owned_by, owner_reference

#: Connection extras that name a kubeconfig, and their old prefix.
KUBECONFIG_EXTRAS, EXTRA_PREFIX = frozenset({"kube_config_path"}), "extra__kubernetes__"
#: The API class and method suffix of each kind a trigger creates or deletes.
CALLS = {
    "pods": ("CoreV1Api", "namespaced_pod"),
    "services": ("CoreV1Api", "namespaced_service"),
    "jobs": ("BatchV1Api", "namespaced_job"),
    "events": ("CoreV1Api", "namespaced_event"),
}
LOG = logging.getLogger(__name__)
#: Seconds a connection's extras read in the event loop serve this triggerer's hooks before a re-read.
EXTRAS_TTL = 300.0
#: Connection id -> (its extras, when they were read): shared by every trigger of the process.
_EXTRAS: dict[str, tuple[dict[str, Any], float]] = {}


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

        extras = self._extras()
        if self.config_dict:
            extras = {k: v for k, v in (extras or {}).items() if k.removeprefix(EXTRA_PREFIX) not in KUBECONFIG_EXTRAS}
        return AsyncKubernetesHook(
            conn_id=self.kubernetes_conn_id,
            in_cluster=self.in_cluster,
            config_dict=dict(self.config_dict) if self.config_dict else None,
            cluster_context=self.cluster_context,
            connection_extras=extras,
        )

    def _extras(self) -> dict[str, Any] | None:
        if self.connection_extras is not None:
            return dict(self.connection_extras)
        fetched = _EXTRAS.get(self.kubernetes_conn_id or "")
        return dict(fetched[0]) if fetched is not None else None

    async def prefetch(self) -> None:
        """Read the connection's extras here, in the event loop, for every hook of this process.

        ``AsyncKubernetesHook`` reads its connection itself, on each new hook; before Airflow 3.3.2
        it does so through ``sync_to_async``, from a thread, and in an Airflow 3.2 triggerer a read
        from a thread races the event loop's own requests to the supervisor and kills the trigger
        runner ("Response read out of order"). ``aget_connection`` reads it in the loop; the hooks
        are then handed the extras (``connection_extras``) and read nothing. Re-read after
        ``EXTRAS_TTL``, so an edited connection reaches running triggers.

        A re-read that fails keeps the extras read before: the supervisor answers a transient error
        as "not found" (``ExecutionAPISecretsBackend.get_connection`` returns None on any error
        response, and ``aget_connection`` then raises ``AirflowNotFoundException``), and taking
        that for the truth would point every hook of the process at ``~/.kube/config`` (the
        default connection's rule below) or fail the next delete (any other connection).

        The read goes through ``utils.supervisor_requests``: it is made wherever a trigger first
        needs a client, under the watch's ``asyncio.wait_for`` or while the runner cancels the
        trigger, and on Airflow 3.2 a request cut short there left its answer to the next request
        and killed the trigger runner ("Response read out of order").
        """
        conn_id = self.kubernetes_conn_id
        if self.connection_extras is not None or not conn_id:
            return
        fetched = _EXTRAS.get(conn_id)
        if fetched is not None and time.monotonic() - fetched[1] < EXTRAS_TTL:
            return
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            connection = await supervisor_requests.request(BaseHook.aget_connection(conn_id))
        except Exception as error:
            if fetched is not None:  # read before: keep that, and try again after the TTL
                LOG.warning(
                    "Connection %s could not be read again (%s: %s); its extras read %.0f s ago stay in use",
                    conn_id, type(error).__name__, error, time.monotonic() - fetched[1],
                )  # fmt: skip
                _EXTRAS[conn_id] = (fetched[0], time.monotonic())
                return
            if not isinstance(error, AirflowNotFoundException) or conn_id != AsyncKubernetesHook.default_conn_name:
                raise
            extras: dict[str, Any] = {}  # the hook's own rule: a missing default connection is an empty one
        else:
            extras = await connection_extras(connection)
        _EXTRAS[conn_id] = (extras, time.monotonic())

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Any]:
        """``hook().get_conn()`` with the connection read in the loop first (``prefetch``)."""
        await self.prefetch()
        async with self.hook().get_conn() as api_client:
            yield api_client


async def connection_extras(connection: Any) -> dict[str, Any]:
    """The connection's extras, each secret in them masked, as ``Connection.extra_dejson`` has them.

    The read masked the extra as one string only; ``extra_dejson`` also masks each value under a
    sensitive key (``token`` in a ``kube_config`` extra, say), which a hook's log lines would
    otherwise show. Masked with ``amask_secret`` where the SDK has it (3.3), which tells the
    supervisor from the loop; ``mask_secret`` from the loop (3.2) masks here only, as the hook's
    own read in the loop would. An extra that is not a JSON object is no extras, as for the hook.
    """
    from airflow.sdk import log as sdk_log

    if not connection.extra:
        return {}
    try:
        extras = json.loads(connection.extra)
    except json.JSONDecodeError as error:
        LOG.error("Connection %s: its extra is not valid JSON (%s); read as no extras", connection.conn_id, error)
        return {}
    if not isinstance(extras, dict):
        LOG.error("Connection %s: its extra is JSON but not an object; read as no extras", connection.conn_id)
        return {}
    amask = getattr(sdk_log, "amask_secret", None)
    if amask is not None:
        await supervisor_requests.request(amask(extras))
    else:
        sdk_log.mask_secret(extras)
    return extras


def _api(client: Any, kind: str) -> tuple[Any, str]:
    import kubernetes_asyncio.client as clients

    api_class, suffix = CALLS[kind]
    return getattr(clients, api_class)(client), suffix


async def create_or_adopt(
    connection: ClusterConnection, kind: str, namespace: str, manifest: dict[str, Any], log: Any = None
) -> bool:
    """Create the object; True when one of that name existed already as this task try's (adopted).

    One that belongs to anything else is an error (``NotThisTaskTry``): it is never taken over. One of
    this task try's that is being deleted is waited out and the object created anew (``adoption``);
    ``StillBeingDeleted`` when it outlasts the wait. While waiting, it is read once a second.
    """
    name = manifest["metadata"]["name"]
    conflict = adoption.NameConflict(manifest, log or LOG)
    while True:
        if await _created(connection, kind, namespace, manifest):
            return False
        existing = await read(connection, kind, namespace, name)
        if existing is None:  # gone between the create and the read: create again
            continue
        if conflict.adopts(existing):
            return True
        while conflict.holds(existing):
            await asyncio.sleep(adoption.GONE_POLL_SECONDS)
            existing = await read(connection, kind, namespace, name)


async def _created(connection: ClusterConnection, kind: str, namespace: str, manifest: dict[str, Any]) -> bool:
    """One create; False when the name is taken (409: another's, or ours whose response was lost)."""
    from kubernetes_asyncio.client.exceptions import ApiException

    async def call() -> bool:
        async with connection.client() as client:
            api, suffix = _api(client, kind)  # a dict body is sent as it is; no model needed
            try:
                await getattr(api, f"create_{suffix}")(namespace, manifest)
            except ApiException as error:
                if error.status != 409:
                    raise
                return False
            return True

    return await acall(call, f"creating {kind} {namespace}/{manifest['metadata']['name']}", log=LOG)


async def read(connection: ClusterConnection, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """The object as an API dict; None once the API no longer has it."""
    from kubernetes_asyncio.client.exceptions import ApiException

    async def call() -> dict[str, Any] | None:
        async with connection.client() as client:
            api, suffix = _api(client, kind)
            response = await getattr(api, f"read_{suffix}")(name, namespace, _preload_content=False)
            if response.status == 404:
                response.release()
                return None
            if response.status >= 400:  # not raised without preloading; as an ApiException it is retried
                error = ApiException(status=response.status, reason=(await response.read()).decode("utf-8", "replace"))
                error.headers = response.headers  # Retry-After
                raise error
            found: dict[str, Any] = json.loads(await response.read())
            return found

    return await acall(call, f"reading {kind} {namespace}/{name}", log=LOG)


async def own_service(connection: ClusterConnection, namespace: str, service: dict[str, Any], log: Any = None) -> None:
    """Make the training Job of the Service's name its owner, as the worker does, so that the garbage
    collector removes the Service with the Job (Mark Failed, a person's delete, a triggerer that died).

    A courtesy: the run deletes its Services itself, so a failed patch is a warning. A Service that is gone
    went with an earlier Job of its name that it was adopted with (being deleted): it is created again.
    """
    from kubernetes_asyncio.client import CoreV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    log = log or LOG
    name = service["metadata"]["name"]
    try:
        job = await read(connection, "jobs", namespace, name)
    except ApiException as error:
        log.warning("Service %s was not given its Job as owner: the Job could not be read (%s)", name, error.status)
        return
    if job is None:
        log.warning("Service %s was not given its Job as owner: the Job is gone", name)
        return
    owner = owner_reference(job)

    async def patch() -> None:
        async with connection.client() as client:  # a dict body: a strategic merge patch
            body = {"metadata": {"ownerReferences": [owner]}}
            await CoreV1Api(client).patch_namespaced_service(name, namespace, body)

    try:
        await acall(patch, f"giving Service {namespace}/{name} its Job as owner", log=log)
    except ApiException as error:
        if error.status != 404:
            log.warning("Service %s was not given its Job as owner (%s %s)", name, error.status, error.reason)
            return
        log.warning("Service %s went with an earlier Job of its name; creating it again", name)
        await create_or_adopt(connection, "services", namespace, owned_by(service, owner), log)


async def annotate(
    connection: ClusterConnection, kind: str, namespace: str, name: str, annotations: dict[str, str]
) -> None:
    """Merge ``annotations`` into the object's (a patch of its metadata alone)."""

    async def call() -> None:
        async with connection.client() as client:
            api, suffix = _api(client, kind)  # a dict body: a strategic merge patch
            await getattr(api, f"patch_{suffix}")(name, namespace, {"metadata": {"annotations": annotations}})

    await acall(call, f"annotating {kind} {namespace}/{name}", log=LOG)


async def delete(connection: ClusterConnection, kind: str, namespace: str, name: str, **options: Any) -> None:
    """Delete the object (``options``: ``propagation_policy``, ``grace_period_seconds``); gone already is fine.
    A pod's finalizer (``utils.end_hold``) is removed next, and a Job's machines': the provider is done with
    what it deletes. A release that fails costs the hold only (the delete came first); ``airflow-gpu reap``
    releases the pod."""
    from kubernetes_asyncio.client.exceptions import ApiException

    async def call() -> None:
        async with connection.client() as client:
            api, suffix = _api(client, kind)
            try:
                await getattr(api, f"delete_{suffix}")(name, namespace, **options)
            except ApiException as error:
                if error.status != 404:
                    raise

    await acall(call, f"deleting {kind} {namespace}/{name}", log=LOG)
    from airflow_gpu.triggers import pod_release

    if kind == "pods":
        await pod_release.release_quietly(connection, namespace, name, LOG)
    if kind == "jobs":  # a training Job: its machines carry the hold too
        await pod_release.release_machines(connection, namespace, name, LOG, list_objects)


async def list_objects(
    connection: ClusterConnection, kind: str, namespace: str, selector: str, fields: str | None = None
) -> list[dict[str, Any]]:
    """The objects of ``kind`` matching the label selector (and field selector), as API dicts: one LIST."""
    from airflow_gpu.triggers.kubernetes_api import checked

    options = {"label_selector": selector, **({"field_selector": fields} if fields else {})}

    async def call() -> list[dict[str, Any]]:
        async with connection.client() as client:
            api, suffix = _api(client, kind)
            listing = getattr(api, f"list_{suffix}")
            response = await checked(await listing(namespace, **options, _preload_content=False))
            items: list[dict[str, Any]] = json.loads(await response.read()).get("items") or []
            return items

    return await acall(call, f"listing {kind} in {namespace} ({selector or fields})", log=LOG)


async def node_stays(connection: ClusterConnection, node: str | None) -> bool | None:
    """Whether the node is there to stay (``classifier.classify_deleted_pod``); None if it cannot be told
    (no node, no ``get nodes``, or an API server that stayed throttled or down past the retry budget).
    A throttled, failed or reset read is asked again: "cannot tell" weighs as a reclaim."""
    from kubernetes_asyncio.client import CoreV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    from airflow_gpu.spot.classifier import node_stays as stays
    from airflow_gpu.spot.node_access import say_nodes_unreadable
    from airflow_gpu.triggers.kubernetes_api import ApiStatusError, checked
    from airflow_gpu.utils.api_retry import transient

    if not node:
        return None

    async def call() -> bool | None:
        async with connection.client() as client:
            response: Any = await CoreV1Api(client).read_node(node, _preload_content=False)
            if response.status == 404:
                response.release()
                return False
            response = await checked(response)  # 429 and 5xx raised, and asked again
            return stays(json.loads(await response.read()))

    try:
        return await acall(call, f"reading node {node}", log=LOG)
    except (ApiException, ApiStatusError) as error:
        if error.status in (401, 403):
            say_nodes_unreadable(LOG, node, error.status)
        return False if error.status == 404 else None
    except Exception as error:
        if not transient(error):
            raise
        LOG.warning("Node %s could not be read (%s: %s); its fate is not known", node, type(error).__name__, error)
        return None


async def pod_log_tail(connection: ClusterConnection, namespace: str, name: str, container: str, lines: int) -> str:
    """The last ``lines`` lines of a container's log, asked again while the API server throttles or fails;
    raises when it cannot be read."""
    from kubernetes_asyncio.client import CoreV1Api

    from airflow_gpu.triggers.kubernetes_api import checked

    async def call() -> str:
        async with connection.client() as client:
            response: Any = await CoreV1Api(client).read_namespaced_pod_log(
                name, namespace, container=container, tail_lines=lines, _preload_content=False
            )
            response = await checked(response)
            text: str = (await response.read()).decode("utf-8", "replace")
            return text

    return await acall(call, f"reading the log of pod {namespace}/{name}", log=LOG)
