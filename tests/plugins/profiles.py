"""``gpu_profile`` documents with known figures, in the version-1 shape the worker writes, and a reader over them.

Hand-made rather than built by the worker's ``build_profile`` so that each test knows the number
the page must show; the series are short (7 points a minute apart) and each GPU differs.
``MemoryReader`` is the app's ``Reader`` over such entries, with each instance's summary made as
the operator makes it; ``test_xcom`` checks the database reader against the same contract.
"""

from __future__ import annotations

import copy
from typing import Any

from airflow_gpu.plugins.document import RunEntry, TaskEntry, profile_summary, sanitise

STARTED = 1763900000.0
A10G = "NVIDIA A10G"
PRICES_SOURCE = "https://aws.amazon.com/ec2/pricing/on-demand/"
UTIL = [10.0, 50.0, 90.0, None, 80.0, 60.0, 5.0]


def document(count: int = 2, *, name: str = A10G, **overrides: Any) -> dict[str, Any]:
    """A finished 6-minute task on ``count`` GPUs: 0.10 GPU-hours each, 61 % mean utilisation, $2.27."""
    times = [STARTED + 60 * i for i in range(7)]
    doc: dict[str, Any] = {
        "v": 1,
        "source": "nvml",
        "note": None,
        "interval": 1.0,
        "started": STARTED,
        "ended": STARTED + 360,
        "exit_code": 0,
        "signals": ["SIGTERM"],
        "spot_notice": None,
        "driver": "550.54.15",
        "cuda": "12.4",
        "gpus": [
            {"index": i, "uuid": f"GPU-{i:08d}", "name": name, "fb_total": 23028.0, "mig": False, "pci": None}
            for i in range(count)
        ],
        "topology": {
            "gpus": [f"GPU{i}" for i in range(count)],
            "matrix": [["X" if i == j else "NV12" for j in range(count)] for i in range(count)],
        },
        "summary": [
            {
                "gpu": i,
                "uuid": f"GPU-{i:08d}",
                "name": name,
                "samples": 360,
                "seconds": 360.0,
                "util_mean": 61.0,
                "util_p95": 93.0,
                "fb_peak": 12288.0,
                "fb_total": 23028.0,
                "power_mean": 150.0,
                "power_peak": 210.0,
                "energy_wh": 15.0,
                "energy_source": "counter",
                "idle_fraction": 0.25,
            }
            for i in range(count)
        ],
        "samples_taken": 360 * count,
        "series": [
            {
                "gpu": i,
                "time": times,
                "gpu_util": [None if u is None else max(u - 5 * i, 0.0) for u in UTIL],
                "mem_copy_util": [1.0] * 7,
                "fb_used": [1024.0, 4096.0, 12288.0, 12288.0, 11264.0, 9216.0, 1024.0],
                "power_usage": [60.0, 150.0, 210.0, 200.0, 190.0, 150.0, 60.0],
                "gpu_temp": [40.0] * 7,
                "sm_clock": [1500.0] * 7,
            }
            for i in range(count)
        ],
        "series_points": 240,
        "backend": "kubernetes",
        "workload": "train-abc123",
        "accelerator": f"A10G:{count}",
        "capacity": "on-demand",
        "instance_type": "g5.12xlarge",
        "interruptions": 0,
        "duration_s": 360.0,
        "gpu_hours": 0.1 * count,
        "energy_wh": 15.0 * count,
        "util_mean": 61.0,
        "cost": {
            "usd": 2.27,
            "instance_type": "g5.12xlarge",
            "capacity": "on-demand",
            "usd_per_hour": 5.672,
            "basis": f"{count} of 4 GPUs of g5.12xlarge for 0.10 h",
            "prices_date": "2026-11-01",
            "source": PRICES_SOURCE,
        },
        "advice": [
            {"kind": "smaller-gpu", "message": "Peak memory 12 GiB fits an L4 (24 GB).", "detail": {"fits": "L4"}}
        ],
        "empty": False,
    }
    doc.update(copy.deepcopy(overrides))
    return doc


def empty_document(note: str = "no NVIDIA driver") -> dict[str, Any]:
    """What the worker writes when the container could not sample: no GPUs, no series, a note."""
    return document(
        0,
        source="none",
        note=note,
        gpus=[],
        summary=[],
        series=[],
        topology=None,
        samples_taken=0,
        gpu_hours=0.0,
        energy_wh=None,
        util_mean=None,
        cost=None,
        advice=[],
        empty=True,
        driver=None,
        cuda=None,
    )


class MemoryReader:
    """The app's ``Reader`` over fixed entries of one run (``run_id``), keeping each call: ``(method, ids)``."""

    def __init__(self, entries: list[TaskEntry], *, dag_id: str | None = None, run_id: str | None = None) -> None:
        self.entries, self.dag_id, self.run_id = entries, dag_id, run_id
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def _ours(self, dag_id: str, run_id: str) -> list[TaskEntry]:
        if self.dag_id not in (None, dag_id) or self.run_id not in (None, run_id):
            return []
        return self.entries

    def entry(self, *, dag_id: str, run_id: str, task_id: str, map_index: int) -> TaskEntry | None:
        self.calls.append(("entry", {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index}))
        found = (e for e in self._ours(dag_id, run_id) if (e.task_id, e.map_index) == (task_id, map_index))
        return next(found, None)

    def map_indexes(self, *, dag_id: str, run_id: str, task_id: str) -> list[int]:
        self.calls.append(("map_indexes", {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}))
        return sorted(e.map_index for e in self._ours(dag_id, run_id) if e.task_id == task_id)

    def run(self, *, dag_id: str, run_id: str) -> list[RunEntry]:
        self.calls.append(("run", {"dag_id": dag_id, "run_id": run_id}))
        ours = sorted(self._ours(dag_id, run_id), key=lambda e: (e.task_id, e.map_index))
        summaries = [None if e.profile is None else profile_summary(sanitise(e.profile)) for e in ours]
        return [RunEntry(e.task_id, e.map_index, s, e.interruptions) for e, s in zip(ours, summaries, strict=True)]
