"""The provider's finalizer (``utils.end_hold``) taken off a pod from a trigger, through the async client.

Every trigger path that is done with a pod comes here: its delete (``cluster.delete``), a kept pod it
replaced (``pod_carry_on``), the ended pods a kill keeps (``kill_spare``), and the machines of a training
Job it deletes (``release_machines``, from ``cluster.delete``). A failure costs only the hold,
never what the trigger did with the pod: ``airflow-gpu reap`` lets it go later. ``connection`` is a
``cluster.ClusterConnection``, not imported: ``cluster.delete`` calls in here.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_gpu.utils.api_retry import acall
from airflow_gpu.utils.end_hold import RELEASE_PATCH

LOG = logging.getLogger(__name__)


async def release(connection: Any, namespace: str, name: str) -> None:
    """Remove the finalizer from the pod; gone already is fine. A pod being deleted goes once its grace
    period is over."""
    from kubernetes_asyncio.client import CoreV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    async def call() -> None:
        async with connection.client() as client:
            api = CoreV1Api(client)
            try:  # a dict body: the async client sends a strategic merge patch
                await api.patch_namespaced_pod(name, namespace, RELEASE_PATCH)
            except ApiException as error:
                if error.status != 404:
                    raise

    await acall(call, f"releasing pod {namespace}/{name}", log=LOG)


async def release_quietly(connection: Any, namespace: str, name: str, log: Any) -> None:
    """``release``, a failure only said: ``airflow-gpu reap`` lets the pod go."""
    try:
        await release(connection, namespace, name)
    except Exception as error:
        log.warning("Could not release pod %s/%s (%s: %s); airflow-gpu reap will", namespace, name,
                    type(error).__name__, error)  # fmt: skip


async def release_machines(connection: Any, namespace: str, job: str, log: Any, list_objects: Any) -> None:
    """Let go of the held machines of a training Job whose deletion was asked: they would keep the Job
    (Foreground) in the API. One LIST (``cluster.list_objects``, passed in: ``cluster`` imports this module);
    a failure only said, as for a pod."""
    from airflow_gpu.utils.end_hold import held
    from airflow_gpu.utils.training_job import JOB_LABEL

    try:
        machines = await list_objects(connection, "pods", namespace, f"{JOB_LABEL}={job}")
    except Exception as error:
        log.warning("Could not list the machines of Job %s/%s to let them go (%s: %s); airflow-gpu reap will",
                    namespace, job, type(error).__name__, error)  # fmt: skip
        return
    for pod in machines:
        if held(pod):
            await release_quietly(connection, namespace, pod["metadata"]["name"], log)
