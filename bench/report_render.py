"""Task page render time and size for 8 GPUs x 24 h at 1 Hz, beside drawing every sample.

The document is made the way a real one is: 86,400 synthetic samples per GPU (a training run's
shape: busy with data-loading dips, one GPU left idle), summarised from all of them, the series
cut by the entrypoint's ``marker.fit`` (240 points per GPU, halved until the payload fits its
96 KiB cap) and completed by the worker's ``build_profile``. Three pages are timed, each the
median of ``--runs`` renders in this process: the task page for that document; the same page
for a document that carries the full series (the renderer cuts each line to
``charts.MAX_POINTS``); and the naive baseline, every sample drawn as one SVG point. Targets:
under 1 s and under 1 MB. The run page for ``--shards`` mapped instances of the document is
timed too.

    python bench/report_render.py [--gpus 8] [--hours 24] [--runs 5] [--shards 64]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import airflow_gpu.plugins.charts as charts
import airflow_gpu.plugins.pages as pages
import airflow_gpu.profiling.marker as marker
from airflow_gpu.plugins.document import RunEntry, profile_summary, rollup
from airflow_gpu.profiling.report import build_profile
from airflow_gpu.profiling.samples import Sample
from airflow_gpu.profiling.summary import summarise

STARTED = 1763900000.0
A100 = "NVIDIA A100-SXM4-80GB"


def synthetic_samples(gpus: int, seconds: int) -> list[Sample]:
    """One sample per GPU per second: utilisation around 85 % with a 60 s dip every 30 min, the last GPU idle."""
    rng = random.Random(13)
    samples = []
    for gpu in range(gpus):
        energy = 0.0
        idle = gpu == gpus - 1 and gpus > 1
        for t in range(seconds):
            util = (
                0.0 if idle else (5.0 if t % 1800 < 60 else min(100.0, 85 + 10 * math.sin(t / 300) + rng.gauss(0, 3)))
            )
            power = 60 + 3.4 * util + rng.gauss(0, 4)
            energy += power * 1000  # mJ in one second
            samples.append(
                Sample(
                    STARTED + t,
                    gpu,
                    f"GPU-{gpu:08x}-0000-0000-0000-000000000000",
                    A100,
                    gpu_util=round(util, 1),
                    mem_copy_util=round(util * 0.4, 1),
                    fb_used=600.0 if idle else min(70_000.0, 20_000 + t / 2),
                    fb_total=81_920.0,
                    power_usage=round(power, 1),
                    total_energy_consumption=energy,
                    gpu_temp=40 + util / 3,
                    sm_clock=1410.0,
                )
            )
    return samples


def make_document(samples: list[Sample], gpus: int, seconds: int) -> tuple[dict[str, Any], int]:
    """The ``gpu_profile`` document for ``samples`` and the size of the payload it came from."""
    payload: dict[str, Any] = {
        "v": marker.VERSION,
        "source": "nvml",
        "note": None,
        "interval": 1.0,
        "started": STARTED,
        "ended": STARTED + seconds,
        "exit_code": 0,
        "signals": [],
        "spot_notice": None,
        "driver": "550.54.15",
        "cuda": "12.4",
        "gpus": [{"index": g, "uuid": f"GPU-{g:08x}", "name": A100, "fb_total": 81_920.0} for g in range(gpus)],
        "topology": None,
        "summary": [s.to_json() for s in summarise(samples)],
        "samples_taken": len(samples),
    }
    text = marker.fit(payload, samples)
    document = build_profile(
        json.loads(text),
        accelerator=f"A100-80GB:{gpus}",
        capacity="on-demand",
        backend="kubernetes",
        workload="train-0",
        instance_type=None,
        interruptions=0,
        warning=None,
    )
    return document, len(text)


def timed(render: Callable[[], str], runs: int) -> tuple[float, int]:
    """Median seconds of ``runs`` renders, and the page's size in bytes (UTF-8)."""
    durations = []
    page = ""
    for _ in range(runs):
        start = time.perf_counter()
        page = render()
        durations.append(time.perf_counter() - start)
    return statistics.median(durations), len(page.encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--shards", type=int, default=64)
    args = parser.parse_args()
    seconds = int(args.hours * 3600)

    samples = synthetic_samples(args.gpus, seconds)
    document, payload_bytes = make_document(samples, args.gpus, seconds)
    full = {**document, "series": marker.series(samples, seconds), "series_points": seconds}
    ids: dict[str, Any] = {"dag_id": "bench", "run_id": "manual__1", "task_id": "train", "map_index": -1}
    base = "/gpu-profile"
    shards = [RunEntry("score", i, profile_summary(document)) for i in range(args.shards)]
    cases: dict[str, Callable[[], str]] = {
        "task page, the document": lambda: pages.task_page(document, **ids, base=base),
        f"task page, full series cut to {charts.MAX_POINTS}": lambda: pages.task_page(full, **ids, base=base),
        "naive: every sample drawn": lambda: pages.task_page(full, **ids, base=base, chart_points=None),
        f"run page, {args.shards} mapped shards": lambda: pages.run_page(
            rollup("bench", "manual__1", shards), shards, base
        ),
    }
    print(
        f"{args.gpus} GPUs x {args.hours:g} h at 1 Hz: {len(samples):,} samples; payload {payload_bytes:,} bytes "
        f"with {document['series_points']} points per GPU (marker.fit, cap {marker.MAX_PAYLOAD_BYTES:,})"
    )
    print(f"median of {args.runs} renders (targets: under 1 s and 1 MB)")
    for name, render in cases.items():
        seconds_taken, size = timed(render, args.runs)
        print(f"  {name:<40} {seconds_taken:8.3f} s {size / 1024:10,.0f} KiB")


if __name__ == "__main__":
    main()
