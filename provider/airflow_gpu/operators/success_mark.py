"""A try that read its workload's success says so in the task state store before anything can lose it; a
retry after that try's worker died takes the success over instead of running the workload again.

Kubernetes: KPO's cleanup deletes a succeeded pod as soon as the try has read it, and the task instance
becomes ``success`` only when ``execute`` has returned and the worker has told the api-server. A worker
that dies in between (SIGKILL, OOM, a lost node: the soak, seed 9, killed one there) leaves no pod for
the retry to take over (``kubernetes_takeover`` needs one) and no success: the retry trained again.
AWS Batch: the job outlives the read, but the try closes its saved run once it has judged the job (so
that a retry never takes over a job an earlier try already judged), and a retry then submits a new one.
So the try records ``{try_number, max_tries, workload, result, run}`` under ``SUCCESS_KEY`` first, with
the result already read from the log and the spot run's state (its interruptions).

A later try takes the record over only when it is a retry of the same clearing: the task instance's
``max_tries`` and the task's ``retries`` are as the record has them. A Clear of a task that is not
running sets ``max_tries`` to ``try_number + retries`` (``clear_task_instances``), which always differs
from the recorded one unless the retries were changed too; a retry changes neither. A user who clears a
task whose try succeeded asks for a new run, and gets one, as ``kubernetes_takeover`` leaves a read pod
alone; a record that does not match only means the workload runs again, as it did before.

The DAG run's ``clear_number`` is not compared (it was until the twelfth soak, seed 831782228): it rises
when any task of the run is cleared, so clearing one shard of a fan-out made two other shards, whose
workers had died after reading their success, run their workloads again. What that leaves: a Clear of
this task while Airflow still has its try as running though its worker is dead (not noticed yet) changes
nothing of this task instance that a retry does not (``restarting``, then, at the heartbeat timeout,
``handle_failure``'s retry with ``max_tries`` as it was), and the retry takes the success that try read
over, saying so in its log; clearing it again, once it succeeded, runs the workload again. A Clear while
the worker lives is told: the scheduler sets ``max_tries`` to ``try_number + retries`` when that try ends.
A try that read a result line that is not
JSON records nothing: it fails, and its retry runs the workload again as before. Without a store
(Airflow 3.2) nothing is recorded, and the window stays.

A record that could not be written (the store's request failed: the supervisor that carries it died,
the api-server answered an error past the retries) must not be followed by the pod's deletion: the
twenty-fourth soak (seed 1786873327) killed a worker while its try wrote the record; the write failed on
the closed pipe before the kernel had reparented the task process, so the try did not yet see itself
orphaned, KPO deleted the pod, and the retry found neither record nor pod and ran the shard again. The pod
is then the record (``unrecorded_pod``): kept, still held by the provider's finalizer, not marked
checked, so a retry takes it over as a success no try read (``kubernetes_takeover``); ``READ_ANNOTATION``
on it holds the reading try's clearing, so a Clear's try does not (``read_in_another_clearing``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_gpu.utils import end_hold, task_state

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The task state store key of the record (named when only pods had one; Batch jobs use it too).
SUCCESS_KEY = "airflow_gpu_pod_succeeded"
#: On a succeeded pod kept because its success could not be recorded: the reading try's number and clearing.
READ_ANNOTATION = "airflow-gpu/read-by"


def clearing(context: Context) -> dict[str, Any]:
    """What a Clear of this task changes and a retry does not (see the module's docstring)."""
    ti = context["ti"]
    return {"max_tries": int(ti.max_tries), "retries": getattr(getattr(ti, "task", None), "retries", None)}


def record(
    context: Context,
    workload: str,
    result: Any,
    run: dict[str, Any],
    location: str | None = None,
    backend: str = "kubernetes",
    unread: str | None = None,
) -> None:
    """This try read the success of ``workload`` (a pod's or a Batch job's name) and ``result`` (None: no result
    line, or ``unread`` says why its log could not be read); ``run`` is the spot run's state, ``location``
    where the workload ran (a Batch job's queue)."""
    value = {"try_number": int(context["ti"].try_number), **clearing(context), "backend": backend,
             "workload": workload, "location": location, "result": result, "run": run}  # fmt: skip
    if unread is not None:
        value["unread"] = unread
    task_state.write(context, SUCCESS_KEY, value)


def recorded(context: Context, backend: str = "kubernetes") -> dict[str, Any] | None:
    """An earlier try's record of this clearing on ``backend``, which this try takes over; None when there is
    none. A record without a backend or a workload is a pod's, written before Batch jobs had them."""
    value = task_state.read(context, SUCCESS_KEY)
    if not isinstance(value, dict) or not isinstance(value.get("run"), dict):
        return None
    if value.get("backend", "kubernetes") != backend:
        return None
    if not isinstance(value.get("workload", value.get("pod")), str):
        return None
    earlier = isinstance(value.get("try_number"), int) and value["try_number"] < int(context["ti"].try_number)
    same = all(value.get(key, "absent") == now for key, now in clearing(context).items())
    return value if earlier and same else None


def take_over(op: Any, context: Context, mark: dict[str, Any]) -> Any:
    """End this try of a ``GPUKubernetesOperator`` with the recorded success: its result and the spot run's
    interruptions, as the earlier try would have ended; no pod is created."""
    earlier, pod = mark["try_number"], mark.get("workload", mark.get("pod"))  # "pod": a record before Batch's
    op.log.info("Try %s read pod %s's success, and its worker ended before the task did: its result is this "
                "try's, and the workload is not run again", earlier, pod)  # fmt: skip
    if ignored := op.spot_run.restore(mark["run"]):
        op.log.warning("The recorded run state is not usable (%s); its interruptions are not published", ignored)
    op._logged_result = mark.get("result")
    op._unread = f"try {earlier} read it, and its worker ended before the task did; its GPU profile went with it"
    if pod:  # read: deleted as that try's cleanup would have, and let go of (``utils.end_hold``)
        _settle(op, str(pod))
    return op._succeed(context, None)


def _settle(op: Any, name: str) -> None:
    """As KPO's cleanup ends with a read pod: deleted, or kept as ``on_finish_action`` says and then labelled
    checked, so that no later try (a Clear's) takes it for a success nobody read; let go of either way."""
    namespace = op.namespace or op.hook.get_namespace() or "default"
    if op.on_finish_action in ("delete_pod", "delete_succeeded_pod"):
        with contextlib.suppress(Exception):  # gone already, most likely
            op.client.delete_namespaced_pod(name, namespace, grace_period_seconds=op.termination_grace_period)
    else:
        from kubernetes.client import models as k8s

        op.patch_already_checked(k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace)), reraise=False)
    end_hold.release_quietly(op.client, name, namespace, op.log)


def read_in_another_clearing(context: Context | None, annotations: Mapping[str, str] | None) -> bool:
    """A pod kept unrecorded (``unrecorded_pod``) by a try of another clearing: a Clear came since, which asks
    for a new run. False without the annotation (a pod no try read) or without a context to compare with."""
    raw = (annotations or {}).get(READ_ANNOTATION)
    if not raw or context is None:
        return False
    try:
        value = json.loads(raw)
    except ValueError:
        return False
    if not isinstance(value, dict):
        return False
    return any(value.get(key, "absent") != now for key, now in clearing(context).items())
