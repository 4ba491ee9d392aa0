"""The spot run of a deferred GPU pod, carried on in the triggerer: classify, decide, create the next pod.

Before, a preempted deferred pod went back to a worker, which created the next pod and deferred
again: a round trip through the scheduler per preemption, each meeting apache/airflow#72716 (a
resumed deferral failed by a stale executor event). Here the trigger holds the run's ``SpotRun``
and the pod of every placement the policy may move to (built by the operator at deferral, see
``manifest_delta``); when the pod is reclaimed, evicted or never gets capacity, it records the
interruption, deletes the pod and creates the next one itself. The task resumes on a worker only
for the final pod (result, logs, profile), with the run's state in the event.

Names are deterministic per task try and submission: ``<first pod>-r<N>``; only ``metadata.name``
and the spot notice path carry it (``named``). A trigger that runs again after a triggerer restart
starts from its first arguments, but the pods it replaced may be gone: it lists the try's pods
(``task_try_selector``) and goes on from the latest one's state (``saved_state``). A twin
(two triggerers, apache/airflow#37180) finds the pod the other made (409) and adopts it when the
pod's labels name the same task try, taking its state when it runs another placement
(``placement_mismatch``); another task's pod with that name is never taken. Interruptions are keyed
by pod name, so a replay counts each once.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_gpu.profiling import wrapper_forms
from airflow_gpu.spot.classifier import (
    Classification,
    Outcome,
    classify_deleted_pod,
    classify_pod,
    completed_before_deletion,
    pod_ended_at,
)
from airflow_gpu.spot.policy import Decision, SpotPolicy
from airflow_gpu.spot.run import SpotRun
from airflow_gpu.spot.start_failure import missing_program, names_program
from airflow_gpu.utils.manifest_delta import apply

#: Stands for the pod's name in the carried manifests: ``metadata.name`` and the notice path only.
NAME_TOKEN = "airflow-gpu-pod-name"
#: Where the ``preStop`` hook writes the spot notice; ``{pod}`` keeps pods apart on shared hosts.
SPOT_NOTICE_PATH = "/tmp/airflow-gpu/{pod}/spot-notice"
#: Pod annotation holding the run's state (the operator's ``STATE_ANNOTATION``).
STATE_ANNOTATION = "airflow-gpu/state"
#: Labels that make a pod this task try's: a pod with the same name but other values is not adopted.
IDENTITY_LABELS = ("dag_id", "task_id", "run_id", "map_index", "try_number")
#: Labels that name a pod's placement (``kubernetes_pod.dress``).
PLACEMENT_LABELS = ("airflow-gpu/accelerator", "airflow-gpu/capacity")
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
        """How the pod ended. A pod whose base container exited 0 before a drain, PodGC or a person deleted or
        disrupted it succeeded (``completed_before_deletion``): it is never replaced, run again (issue 26)."""
        if completed_before_deletion(last_seen, self.base_container):
            return Classification(Outcome.SUCCEEDED, "Succeeded", exit_code=0)
        if deleted:
            return classify_deleted_pod(last_seen, node_stays, self.base_container)
        if last_seen is None:  # never seen, and not seen deleted: nothing tells an interruption
            return Classification(Outcome.UNKNOWN, "NotSeen", "the trigger saw no state of the pod")
        return classify_pod(last_seen)

    def decide(
        self, pod_name: str, result: Classification, node: str | None, last_seen: Mapping[str, Any] | None = None
    ) -> Decision:
        """Record how the pod ended (keyed by its name: a replay counts it once, and stamps it with when the
        pod ended, from ``last_seen``) and say what comes next."""
        self.run.submitted(pod_name)
        return self.run.finish(result, location=node, identity=pod_name, ended_at=[pod_ended_at(last_seen)])

    def wrapper_fallback(self, last_seen: Mapping[str, Any] | None) -> str | None:
        """The pod could not start because its image lacks the profiler wrapper's program (``/bin/sh`` in a
        distroless image): the run moves that image to the next form (``profiling.wrapper_forms``) and will
        start the same pod again, no interruption counted. Returns the note for the task's log; None for
        any other end."""
        program = missing_program(last_seen, self.base_container)
        if program is None:
            return None
        base = next(c for c in self._current()["spec"]["containers"] if c.get("name") == self.base_container)
        image, form = str(base.get("image")), wrapper_forms.form_of(base.get("command"))
        if form is None or not names_program(program, form):
            return None
        self.run.profiler_forms[image] = wrapper_forms.next_form(form)
        self.run.resubmit_unchanged()
        return f"its image has no {program}; {wrapper_forms.note(image, self.run.profiler_forms[image])}"

    def replaceable(self, result: Classification) -> bool:
        """Whether the trigger may act on its own: interruptions and missing capacity, not the pod's end."""
        return result.outcome is Outcome.UNSCHEDULABLE or result.interrupted

    # --- the next pod -------------------------------------------------------------------

    def selector(self) -> str:
        """The label selector of this task try's pods (every pod of the run carries its identity labels)."""
        return task_try_selector(self.base)

    def next_name(self) -> str:
        return submission_name(self.first_name, self.run.submissions)

    def _current(self) -> dict[str, Any]:
        """The carried pod of the run's current placement, its base container in the form its image needs."""
        key = placement_key(self.run.placement.candidate, self.run.placement.capacity)
        if key not in self.deltas and key != self.base_key:
            raise KeyError(f"no pod was carried for placement {key}; carried: {sorted([self.base_key, *self.deltas])}")
        pod = copy.deepcopy(self.base) if key == self.base_key else apply(self.base, self.deltas[key])
        for container in (pod.get("spec") or {}).get("containers") or []:
            if container.get("name") == self.base_container:
                form = wrapper_forms.recorded(self.run.profiler_forms, str(container.get("image")))
                wrapper_forms.rewrap(container, form)
        return pod

    def manifest(self, name: str) -> dict[str, Any]:
        """The pod of the run's current placement, named, with the run's environment and state."""
        pod = named(self._current(), name, self.first_name)
        metadata = pod.setdefault("metadata", {})
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


def submission_name(first_name: str, submissions: int) -> str:
    """The pod the trigger creates after ``submissions`` others: ``<first pod>-r<N>``, within 63 characters."""
    suffix = f"-r{submissions}"
    return first_name[: MAX_NAME - len(suffix)].rstrip("-.") + suffix


def notice_hook(notice_file: str) -> list[str]:
    """The ``preStop`` command that writes the spot notice (``kubernetes_pod.dress``)."""
    notice = f"mkdir -p {notice_file.rsplit('/', 1)[0]} && date -u +%Y-%m-%dT%H:%M:%SZ > {notice_file}"
    return ["/bin/sh", "-c", notice]


def notice_directory(pod_name: str) -> str:
    """The directory of a pod's spot notice (``SPOT_NOTICE_PATH``), which its ``preStop`` hook creates."""
    return SPOT_NOTICE_PATH.format(pod=pod_name).rsplit("/", 1)[0]


def named(pod: dict[str, Any], name: str, first_name: str) -> dict[str, Any]:
    """The carried pod with its name: ``metadata.name`` and the notice directory, nothing else.

    The worker marks only those two with ``NAME_TOKEN`` (``kubernetes_deferral.pod_manifest``). An
    earlier build replaced the pod's name wherever it occurred, so a name like ``train`` left the token
    in a ``task_id`` label, a command or a volume name too: in such a plan the token stands for the
    first pod's name there, and is given back.
    """
    text = json.dumps(pod).replace(notice_directory(NAME_TOKEN), notice_directory(name))
    carried: dict[str, Any] = json.loads(text.replace(NAME_TOKEN, first_name))
    carried.setdefault("metadata", {})["name"] = name
    return carried


def task_try_selector(pod: Mapping[str, Any]) -> str:
    """``dag_id=...,task_id=...,...``: the identity labels of the pod (empty when it has none)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return ",".join(f"{k}={labels[k]}" for k in IDENTITY_LABELS if k in labels)


def placement_mismatch(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> str | None:
    """Why an adopted pod does not run the wanted placement (None: it does)."""
    have = (existing.get("metadata") or {}).get("labels") or {}
    want = (wanted.get("metadata") or {}).get("labels") or {}
    for label in PLACEMENT_LABELS:
        if have.get(label) != want.get(label):
            return f"its label {label}={have.get(label)!r} is not {want.get(label)!r}"
    return None


def saved_state(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The run's state a pod carries (``STATE_ANNOTATION``: as it was when the pod was made), if readable."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(STATE_ANNOTATION)
    try:
        state = json.loads(text) if text else None
    except (TypeError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def same_task_try(existing: dict[str, Any], wanted: dict[str, Any]) -> str | None:
    """Why an existing pod of the wanted name is not this task try's (None: it is, adopt it)."""
    have = (existing.get("metadata") or {}).get("labels") or {}
    want = (wanted.get("metadata") or {}).get("labels") or {}
    for label in IDENTITY_LABELS:
        if have.get(label) != want.get(label):
            return f"its label {label}={have.get(label)!r} is not {want.get(label)!r}"
    return None
