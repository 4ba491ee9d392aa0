"""When each pod reached each phase, to the microsecond, by this host's clock.

The API tells a pod's transitions to the second (``lastTransitionTime``, ``startedAt``,
``finishedAt``: RFC 3339 without fractions, as the API server writes them). How fast a client
learns that a pod ended is a matter of milliseconds, so a benchmark needs the moment the emulator
recorded the phase, on a clock the client's process reads too (``time.time()``: both run on this
host). This record gives it without changing the objects the API serves:
``KubernetesEmulator.pod_phase_times()`` and ``GET /_emulator/phase-times?namespace=``.

It also records when a watch first wrote each phase to its client (``sent``): a watch event leaves
some time after the change, when the emulator's loop gets to that watch's stream. A benchmark that
measures a client from the change can then tell the server's share of the latency from the client's,
as a real API server's watch-cache latency metrics do.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_gpu.testing.kubernetes.store import Obj, Store

#: Pods remembered at most (the oldest are forgotten first): a long-lived emulator stays small.
LIMIT = 100_000


class PhaseClock:
    """Per pod (namespace, name): its uid, the wall time it first showed each phase and the wall time a
    watch first sent it, and its deletion."""

    def __init__(self, store: Store, limit: int = LIMIT) -> None:
        self.limit = limit
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        store.subscribe(self._observe, before_watches=True)  # recorded before any watch can send it

    def _observe(self, plural: str, event: str, obj: Obj) -> None:
        if plural != "pods":
            return
        metadata = obj["metadata"]
        key = (metadata.get("namespace", ""), metadata["name"])
        entry = self._pods.get(key)
        if entry is None or entry["uid"] != metadata.get("uid"):  # a new pod, perhaps of a name seen before
            self._pods.pop(key, None)
            entry = self._pods[key] = {
                "uid": metadata.get("uid"),
                "phases": {},
                "versions": {},  # phase -> the resourceVersion that first showed it
                "sent": {},
                "deleted": None,
            }
            if len(self._pods) > self.limit:
                del self._pods[next(iter(self._pods))]
        if event == "DELETED":
            entry["deleted"] = time.time()
            return
        phase = (obj.get("status") or {}).get("phase")
        if phase and phase not in entry["phases"]:
            entry["phases"][phase] = time.time()
            entry["versions"][phase] = int(metadata["resourceVersion"])

    def sent(self, namespace: str, name: str, version: int) -> None:
        """A watch wrote the pod as of resourceVersion ``version`` to its client: the phase it had then
        (the last one first shown at or before that version) was sent now, unless a watch sent it before."""
        entry = self._pods.get((namespace, name))
        if entry is None or len(entry["sent"]) == len(entry["versions"]):
            return
        shown = [(first, phase) for phase, first in entry["versions"].items() if first <= version]
        if shown:
            entry["sent"].setdefault(max(shown)[1], time.time())

    def times(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """``{"namespace", "name", "uid", "phases": {phase: epoch seconds}, "sent": {phase: epoch seconds},
        "deleted": epoch or None}`` per pod, oldest first (``sent``: only the phases a watch sent)."""
        return [
            {
                "namespace": ns,
                "name": name,
                "uid": entry["uid"],
                "phases": dict(entry["phases"]),
                "sent": dict(entry["sent"]),
                "deleted": entry["deleted"],
            }
            for (ns, name), entry in self._pods.items()
            if namespace in (None, ns)
        ]
