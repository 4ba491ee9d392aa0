"""The replacement step of ``GPUPodTrigger``: after an interruption, the next pod, made by the triggerer.

``pod_replacement`` decides (pure: classify, decide, build the next pod); this module acts on the
cluster for the trigger: it finds where a run that ran before stands (``_resume_point``), judges
each ended pod and, when the policy resubmits, writes the ended pod's log into the task's log,
deletes it, and creates or adopts the next pod (``_carry_on``). It is the trigger's mixin
(``PodCarryOn``), apart from the trigger's wait for one pod (``triggers.kubernetes``) so that each
reads on its own: the wait is the official trigger's, fed by the shared watch; the replacement is
ours, and only runs with a spot run (``gpu_spot``).

The event keys the worker reads (``STATE_KEY``, ``NEXT_KEY``, ``LAST_SEEN_KEY``) live here, and
``triggers.kubernetes`` re-exports them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

from airflow_gpu.spot.classifier import Outcome
from airflow_gpu.triggers import cluster, pod_release
from airflow_gpu.triggers.interruption_log import log_interruptions
from airflow_gpu.triggers.pod_replacement import PodReplacement, placement_mismatch, saved_state

if TYPE_CHECKING:
    from airflow_gpu.triggers.kubernetes import GPUPodTrigger

#: Event key carrying the pod as last seen (every event but ``success``).
LAST_SEEN_KEY = "gpu_last_seen"
#: The last lines of an interrupted pod's log that the trigger writes into the task's log.
LOG_TAIL_LINES = 10_000
#: Event key carrying the spot run's state to the worker, when the trigger carried the run on.
STATE_KEY = "gpu_state"
#: Event key set when the trigger decided to resubmit but could not create the next pod: the worker does.
NEXT_KEY = "gpu_next_pod"


class PodCarryOn:
    """``GPUPodTrigger``'s replacement step (a mixin of it: only ``GPUPodTrigger`` mixes it in)."""

    def _past_deadline(self) -> bool:
        """Whether the task's ``execution_timeout`` has passed (KPO's ``_execution_deadline``)."""
        trigger = _trigger(self)
        deadline = trigger.trigger_kwargs.get("_execution_deadline")
        return deadline is not None and time.time() >= float(deadline)

    async def _resume_point(self, replacement: PodReplacement) -> None:
        """Where the run is: the first pod, or, when this trigger ran before (a triggerer restart, a twin:
        apache/airflow#37180), the latest pod it created, with the run's state as recorded on that pod.

        A restarted trigger starts from its first arguments, but the pods it replaced may be gone (deleted
        as ``on_finish_action`` says, or as an unschedulable pod is): replaying their ends would read as
        deletions. One LIST of this try's pods finds where it was.
        """
        trigger = _trigger(self)
        selector = replacement.selector()
        if not selector:
            return
        try:
            found = await cluster.list_objects(trigger.watch.connection, "pods", trigger.pod_namespace, selector)
        except Exception as error:  # the first pod's wait reports what the cluster says
            trigger.log.warning("Could not list this task try's pods (%s: %s)", type(error).__name__, error)
            return
        ranked = [(int((saved_state(p) or {}).get("submissions") or 0), p) for p in found]
        if not ranked:
            return
        submissions, latest = max(ranked, key=lambda item: item[0])
        state = saved_state(latest)
        if state is None or submissions <= replacement.run.submissions:
            return
        if ignored := replacement.run.restore(state):
            trigger.log.warning("The state on pod %s is not usable (%s); going on from the first pod", latest, ignored)
            return
        trigger.pod_name = latest["metadata"]["name"]
        trigger.log.info("Going on with pod %s (submission %d), made by this trigger before", trigger.pod_name,
                         submissions + 1)  # fmt: skip

    async def _carry_on(self, replacement: PodReplacement, payload: dict[str, Any]) -> dict[str, Any] | None:
        """The event for the worker, or None when the pod's end was an interruption the policy rides out
        here and the next pod exists.

        Nothing is replaced past the task's ``execution_timeout``, nor on a timeout other than a pod that
        got no capacity in time. An error on the way (a quota that refuses the create, a pod of the next
        name that is not this try's) goes to the worker with the run's state, which goes on from there.
        """
        trigger = _trigger(self)
        ended = replacement.run.to_json()  # what the worker decides from, if it is the last pod
        final = {**payload, STATE_KEY: ended}
        last = payload.get(LAST_SEEN_KEY) or trigger._last_seen
        if trigger._past_deadline():
            return final
        if payload.get("status") in ("failed", "error") and (note := replacement.wrapper_fallback(last)):
            trigger.log.warning("GPU profile: pod %s could not start (%s); starting it again", trigger.pod_name, note)
            pending = ((last or {}).get("status") or {}).get("phase") not in ("Succeeded", "Failed")  # CRI-O's
            return await self._next_pod(replacement, ended, final, last, replacement.delete_ended or pending)
        if payload.get("status") in ("success", "error"):
            return final
        deleted = trigger._gone is not None or bool(((last or {}).get("metadata") or {}).get("deletionTimestamp"))
        node = ((last or {}).get("spec") or {}).get("nodeName")
        result = replacement.classify(last, deleted, await trigger._node_stays(node) if deleted else None)
        if not replacement.replaceable(result):
            return final
        if payload.get("status") == "timeout" and result.outcome is not Outcome.UNSCHEDULABLE:
            return final  # a startup that took too long: the worker's to judge, as KPO does
        decision = replacement.decide(trigger.pod_name, result, node, last)
        if decision.action != "resubmit":
            replacement.run.restore(ended)  # the worker records it and fails, as for any last pod
            return final
        await trigger._write_log(trigger.pod_name)
        log_interruptions(trigger.log, replacement.run, decision, trigger.pod_name)
        delete = replacement.delete_ended or result.outcome is Outcome.UNSCHEDULABLE
        return await self._next_pod(replacement, ended, final, last, delete)

    async def _next_pod(
        self, replacement: PodReplacement, ended: dict[str, Any], final: dict[str, Any], last: Any, delete: bool
    ) -> dict[str, Any] | None:
        """The ended pod deleted (``delete``) and the run's next pod created: None, or the event for the worker
        when either cannot be done (``ended``: the run's state before the decision, ``final``: its event)."""
        trigger = _trigger(self)
        ended_pod = trigger.pod_name
        try:
            if delete:
                await trigger._delete(ended_pod)
            else:  # kept, read: let go of it (``utils.end_hold``), or a deletion (PodGC's) would wait for ever
                await pod_release.release_quietly(trigger.watch.connection, trigger.pod_namespace, ended_pod,
                                                  trigger.log)  # fmt: skip
        except Exception as error:  # the pod is there still: the worker judges it, as any last pod
            trigger.log.warning("Could not delete pod %s (%s: %s)", ended_pod, type(error).__name__, error)
            replacement.run.restore(ended)
            return final
        name = replacement.next_name()
        try:
            adopted = await trigger._create(replacement, name)
        except Exception as error:
            trigger.log.warning(
                "Could not create pod %s (%s: %s); the worker goes on", name, type(error).__name__, error
            )
            return {
                "status": "error", "namespace": trigger.pod_namespace, "name": ended_pod,
                "message": f"the triggerer could not create pod {name}: {type(error).__name__}: {error}",
                "last_log_time": trigger.last_log_time, LAST_SEEN_KEY: last, STATE_KEY: replacement.run.to_json(),
                NEXT_KEY: True, **trigger.trigger_kwargs,
            }  # fmt: skip
        finally:
            trigger._creating = None
        trigger.log.info(
            "%s pod %s on %s (%s capacity) in place of %s", "Adopted" if adopted else "Created", name,
            replacement.run.accelerator, replacement.run.capacity, ended_pod,
        )  # fmt: skip
        trigger.pod_name, trigger._gone, trigger._last_seen, trigger._fired_event = name, None, None, False
        return None

    async def _node_stays(self, node: str | None) -> bool | None:
        """Whether the pod's node is there to stay (``classify_deleted_pod``); None if it cannot be told."""
        trigger = _trigger(self)
        return await cluster.node_stays(trigger.watch.connection, node)

    async def _write_log(self, name: str) -> None:
        """The ended pod's output into the task's trigger log, as the worker writes the last pod's:
        what an interrupted attempt printed (its last checkpoint) is not lost with the pod."""
        trigger = _trigger(self)
        if not trigger.get_logs:
            return
        try:
            text = await cluster.pod_log_tail(
                trigger.watch.connection, trigger.pod_namespace, name, trigger.base_container_name, LOG_TAIL_LINES
            )
        except Exception as error:  # the run goes on without it
            trigger.log.info("The log of pod %s could not be read (%s: %s)", name, type(error).__name__, error)
            return
        for line in text.splitlines():
            if line.strip() and not line.startswith("::airflow-gpu-"):  # result, profile: from the last pod
                trigger.log.info("[%s] %s", trigger.base_container_name, line)

    async def _delete(self, name: str) -> None:
        trigger = _trigger(self)
        await cluster.delete(trigger.watch.connection, "pods", trigger.pod_namespace, name, grace_period_seconds=0)

    async def _create(self, replacement: PodReplacement, name: str) -> bool:
        """Create the pod; True when it existed already as this task try's (adopted). A pod of that name
        that belongs to anything else is an error: it is never taken over. An adopted pod that runs
        another placement (a twin trigger decided otherwise) brings its run state, or is refused."""
        trigger = _trigger(self)
        manifest = replacement.manifest(name)
        trigger._creating = name  # for ``on_kill``: a create in flight when the task is marked failed
        adopted = await cluster.create_or_adopt(trigger.watch.connection, "pods", trigger.pod_namespace, manifest)
        if not adopted:
            return False
        existing = await cluster.read(trigger.watch.connection, "pods", trigger.pod_namespace, name)
        mismatch = placement_mismatch(existing or {}, manifest)
        if existing is None or mismatch is None:
            return True
        state = saved_state(existing)
        if state is None or replacement.run.restore(state):
            raise cluster.NotThisTaskTry(f"pod {name} of this task try runs another placement: {mismatch}")
        trigger.log.info("Pod %s was made by a twin of this trigger on %s; its run state is taken over", name,
                         replacement.run.accelerator)  # fmt: skip
        return True


def _trigger(mixin: PodCarryOn) -> GPUPodTrigger:
    """The trigger this mixin is part of."""
    return cast("GPUPodTrigger", mixin)
