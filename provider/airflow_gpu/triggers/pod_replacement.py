"""The spot run of a deferred GPU pod, carried on in the triggerer: classify, decide, create the next pod.

Before, a preempted deferred pod went back to a worker, which created the next pod and deferred
again: a round trip through the scheduler per preemption, each meeting apache/airflow#72716 (a
resumed deferral failed by a stale executor event). Here the trigger holds the run's ``SpotRun``
and the pod of every placement the policy may move to (built by the operator at deferral, see
``manifest_delta``); when the pod is reclaimed, evicted or never gets capacity, it records the
interruption, deletes the pod and creates the next one itself. The task resumes on a worker only
for the final pod (result, logs, profile), with the run's state in the event.

Names are deterministic per task try and submission: ``<first pod>-r<N>``. A trigger that runs
twice (two triggerers, apache/airflow#37180) or again after a triggerer restart (it starts from its
first arguments, so it replays the run: the pods it replaced are gone, and it creates the same
names) finds the pod it already made (409) and adopts it when the pod's labels name the same task
try; another task's pod with that name is never taken. Interruptions are keyed by pod name, so a
replay counts each once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_gpu.spot.classifier import Classification, Outcome, classify_deleted_pod, classify_pod, pod_ended_at
from airflow_gpu.spot.policy import Decision, SpotPolicy
from airflow_gpu.spot.run import SpotRun
from airflow_gpu.utils.manifest_delta import apply

#: Stands for the pod's name in the carried manifests (the name is in its notice path too).
NAME_TOKEN = "airflow-gpu-pod-name"
#: Pod annotation holding the run's state (the operator's ``STATE_ANNOTATION``).
STATE_ANNOTATION = "airflow-gpu/state"
#: Labels that make a pod this task try's: a pod with the same name but other values is not adopted.
IDENTITY_LABELS = ("dag_id", "task_id", "run_id", "map_index", "try_number")
MAX_NAME = 63
R = TypeVar("R", bound="PodReplacement")


def placement_key(candidate: int, capacity: str | None) -> str:
    return f"{candidate}/{capacity or 'any'}"


@dataclass
class PodReplacement:
    """What the trigger needs to go on with the spot run; built from the trigger's ``gpu_spot`` argument."""

    run: SpotRun
    base: dict[str, Any]  # one placement's pod, its name replaced by NAME_TOKEN
    base_key: str  # that placement
    deltas: dict[str, Any]  # every other placement key -> its delta from ``base``
    first_name: str
    base_container: str
    delete_ended: bool  # on_finish_action deletes a failed pod

    @classmethod
    def from_argument(cls: type[R], spot: dict[str, Any], base_container: str, on_finish_action: str) -> R:
        run = SpotRun.start(
            SpotPolicy(**spot["policy"]), spot["candidates"], "kubernetes", spot.get("requested_capacity")
        )
        ignored = run.restore(spot["state"])
        if ignored:
            raise ValueError(f"the spot state carried to the trigger is not usable: {ignored}")
        return cls(
            run, spot["base"], spot["base_key"], spot["deltas"], spot["first_name"], base_container,
            on_finish_action == "delete_pod",
        )  # fmt: skip

    # --- deciding -----------------------------------------------------------------------

    def classify(self, last_seen: dict[str, Any] | None, deleted: bool, node_stays: bool | None) -> Classification:
        if deleted:
            return classify_deleted_pod(last_seen, node_stays)
        return classify_pod(last_seen)

    def decide(
        self, pod_name: str, result: Classification, node: str | None, last_seen: Mapping[str, Any] | None = None
    ) -> Decision:
        """Record how the pod ended (keyed by its name: a replay counts it once, and stamps it with when the
        pod ended, from ``last_seen``) and say what comes next."""
        self.run.submitted(pod_name)
        return self.run.finish(result, location=node, identity=pod_name, ended_at=[pod_ended_at(last_seen)])

    def replaceable(self, result: Classification) -> bool:
        """Whether the trigger may act on its own: interruptions and missing capacity, not the pod's end."""
        return result.outcome is Outcome.UNSCHEDULABLE or result.interrupted

    # --- the next pod -------------------------------------------------------------------

    def next_name(self) -> str:
        suffix = f"-r{self.run.submissions}"
        return self.first_name[: MAX_NAME - len(suffix)].rstrip("-.") + suffix

    def manifest(self, name: str) -> dict[str, Any]:
        """The pod of the run's current placement, named, with the run's environment and state."""
        key = placement_key(self.run.placement.candidate, self.run.placement.capacity)
        if key not in self.deltas and key != self.base_key:
            raise KeyError(f"no pod was carried for placement {key}; carried: {sorted([self.base_key, *self.deltas])}")
        pod = self.base if key == self.base_key else apply(self.base, self.deltas[key])
        pod = dict(json.loads(json.dumps(pod).replace(NAME_TOKEN, name)))
        metadata = pod.setdefault("metadata", {})
        metadata["name"] = name
        for server_owned in ("uid", "resourceVersion", "creationTimestamp"):
            metadata.pop(server_owned, None)
        metadata.setdefault("annotations", {})[STATE_ANNOTATION] = json.dumps(self.run.to_json())
        environment = self.run.environment()
        for container in pod.get("spec", {}).get("containers") or []:
            if container.get("name") != self.base_container:
                continue
            env = [e for e in container.get("env") or [] if e.get("name") not in environment]
            container["env"] = [*env, *({"name": k, "value": v} for k, v in environment.items())]
        return pod


def same_task_try(existing: dict[str, Any], wanted: dict[str, Any]) -> str | None:
    """Why an existing pod of the wanted name is not this task try's (None: it is, adopt it)."""
    have = (existing.get("metadata") or {}).get("labels") or {}
    want = (wanted.get("metadata") or {}).get("labels") or {}
    for label in IDENTITY_LABELS:
        if have.get(label) != want.get(label):
            return f"its label {label}={have.get(label)!r} is not {want.get(label)!r}"
    return None
