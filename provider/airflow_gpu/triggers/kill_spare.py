"""Which workloads a GPU trigger's kill leaves running, and why: one that has ended, one handed back.

With two triggerers a trigger can run on both (apache/airflow#37180). When one copy fires, the task
leaves DEFERRED and the other copy is cancelled as if a person had killed the task (``kill_guard``).
Its kill must not take from the resumed task what it comes back for:

* **an ended workload**: a pod whose base container terminated (the pod Succeeded or Failed, or
  still Running for its XCom sidecar, which waits for the task to read the result), a training Job
  that its controller has judged. Its log, result line and profile are the resumed task's to read
  and delete, whatever the task's state; it runs nothing more;
* **a workload handed back**: one that the other copy handed to the worker with a ``timeout`` or
  ``error`` event while it still runs, as the mark it wrote says (``handed_back``). The worker
  follows it on, or deletes it.

A kill judges each object as just listed, or reads it through the retrying API path
(``cluster.read``) within the kill's budget; one that cannot be read is deleted: a person's Mark
Failed must not leave a GPU running, billed.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu.triggers import cluster, handed_back, kill_tasks


async def read(trigger: Any, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """The object as the cluster has it now; None when it is gone; ``{}`` when it cannot be read."""
    try:
        return await cluster.read(trigger.connection, kind, namespace, name)
    except Exception as error:
        trigger.log.warning("Could not read %s %s/%s before deleting it (%s: %s)", kind[:-1], namespace, name,
                            type(error).__name__, error)  # fmt: skip
        return {}


async def let_go(trigger: Any, pods: list[dict[str, Any]]) -> None:
    """The provider's finalizer off the pods (as listed) of this try that the kill keeps or leaves
    (``utils.end_hold``), except those handed back to the worker by the other copy: an ended one a resumed
    copy of the task reads at once if there is one; after a person's Mark Failed nothing will, and a
    deletion of it (PodGC's, a drain's) would wait for ``airflow-gpu reap``."""
    from airflow_gpu.triggers import pod_release
    from airflow_gpu.utils.end_hold import held

    for pod in pods:
        if held(pod) and not handed_back.by_twin(trigger, pod):
            name = str(pod["metadata"]["name"])
            await pod_release.release_quietly(trigger.connection, trigger.pod_namespace, name, trigger.log)


def pod_ended(pod: dict[str, Any], container: str) -> bool:
    """Whether the pod's workload has ended: Succeeded or Failed, or its base ``container`` terminated."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return True
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any(s.get("name") == container and (s.get("state") or {}).get("terminated") for s in statuses)


def spared(
    trigger: Any, kill: kill_tasks.Kill, what: str, refs: tuple[str, ...], marked: dict[str, Any] | None, ended: bool
) -> bool:
    """Whether the kill leaves ``what`` (``marked``: the object that may carry the hand-back mark) running;
    when it does, says why once and counts ``refs`` as settled for the kill."""
    if handed_back.by_twin(trigger, marked):
        trigger.log.info("%s was handed to the task by this trigger's other copy: it is not deleted", what)
    elif ended:
        trigger.log.info("%s has ended: it is kept for the task that reads it, not deleted", what)
    else:
        return False
    for ref in refs:
        kill.stopped(ref)  # nothing more runs, or the worker follows it on
    return True
