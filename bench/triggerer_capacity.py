"""Deferred GPU pods one triggerer holds: ``GPUPodTrigger`` up to 10,000, next to the official trigger's ceiling.

Each step is a triggerer process of its own (one event loop, as Airflow's triggerer runs its
triggers) that takes up N triggers at once, as a triggerer does when it starts, against the same
running pods of the Kubernetes emulator in scale mode (its own process, simulated containers):
1,000, 2,000, 5,000 and 10,000 ``GPUPodTrigger``; 25, 50, 100, 200... ``KubernetesPodTrigger``.
Once every trigger waits, one window is measured: API requests/s (the emulator's ``/metrics``), the
process's CPU, its resident memory over what it had before the first trigger, and how late its
event loop wakes a 100 ms timer. At the top step, ``--late`` more ``GPUPodTrigger`` then arrive one
by one after the watch has listed, as deferrals trickle in, and what each costs to take up is
measured.

A step is *held* when every trigger still waits (no event: each pod runs all along, so any event is
an error or a timeout), the process stays below 90% of a core (the event loop has room left), and,
for ``KubernetesPodTrigger``, at least 99% of its polls meet their deadline: a read no more than one
poll interval late, i.e. no more than 4 s after the one before with the 2 s default (a poll later
than that and a pod that ends is seen late by more than the interval the user chose). The official
trigger's *ceiling* is the last step it held; its run stops at the first step it does not, so the
benchmark ends in minutes.

    python bench/triggerer_capacity.py            # ours to 10,000; official from 25 up (~5 min)
    python bench/triggerer_capacity.py --quick    # ours to 2,000; official to 100 (~2 min)
"""

from __future__ import annotations

import os

os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "ERROR")  # else a line per trigger per poll

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import emulator_process
import fleet

OURS_STEPS = (1000, 2000, 5000, 10000)
OFFICIAL_STEPS = (25, 50, 100, 200, 400, 800)
QUICK_OURS, QUICK_OFFICIAL, QUICK_WINDOW = (1000, 2000), (25, 50, 100), 8.0
LATE = 200  # GPUPodTrigger that arrive after the watch listed, at the top step
GOAL_PODS = 10_000
#: A step is held below this share of one core, and (official) with this share of its polls on time.
CPU_LIMIT, POLLS_ON_TIME = 90.0, 0.99
#: A poll is late when it comes more than one poll interval after it should.
POLL_DEADLINE = 2 * fleet.POLL_INTERVAL


def held(kind: str, step: dict[str, Any]) -> tuple[bool, str]:
    """Whether the triggerer held its pods in that step, and if not, why."""
    why = []
    if step["ended"]:
        why.append(f"{step['ended']} triggers fired ({', '.join(sorted(set(step['statuses'])))})")
    if step["cpu_percent"] >= CPU_LIMIT:
        why.append(f"CPU {step['cpu_percent']:.0f}%")
    if kind == "official" and step["polls_on_time"] < POLLS_ON_TIME:
        why.append(f"{100 * (1 - step['polls_on_time']):.0f}% of its polls late (p99 gap {step['gap_p99_s']:.1f} s)")
    if not step["all_waiting"]:
        why.append("not every trigger waiting (in its poll loop, or on the shared watch) after 300 s")
    return not why, "; ".join(why)


# --- the triggerer process -----------------------------------------------------------------------


async def triggerer(kind: str, count: int, late: int, window: float, kubeconfig: Path, url: str) -> None:
    """Take up ``count`` triggers at once, measure a window once all wait, then take up ``late`` more."""
    # Imported before the baseline, as a triggerer has them.
    from airflow.providers.cncf.kubernetes.triggers import pod  # noqa: F401

    import airflow_gpu.triggers.kubernetes  # noqa: F401

    polls = fleet.PollClock() if kind == "official" else None
    baseline = fleet.rss_mib()
    names = [f"shard-{i}" for i in range(count + late)]
    started = time.monotonic()
    tasks = [asyncio.create_task(fleet.first_event(t)) for t in fleet.make_triggers(kind, names[:count], kubeconfig)]
    settled = await fleet.settle(kind, names[:count], polls)
    take_up = time.monotonic() - started
    lag = fleet.LoopLag()
    lag.start()
    requests_before = await asyncio.to_thread(emulator_process.requests_served, url)
    cpu_before, started = time.process_time(), time.monotonic()
    await asyncio.sleep(window)
    requests_after = await asyncio.to_thread(emulator_process.requests_served, url)
    cpu, elapsed = time.process_time() - cpu_before, time.monotonic() - started
    statuses = [t.result()[0].get("status", "?") if not t.exception() else "exception" for t in tasks if t.done()]
    gaps = polls.gaps(names[:count], started, started + elapsed) if polls is not None else [0.0]
    waiting = settled and (kind == "official" or fleet.shared_watches_ready(count))
    fleet.report(
        event="step", pods=count, baseline_mib=baseline, rss_mib=fleet.rss_mib(), take_up_s=take_up,
        requests_per_second=(requests_after - requests_before) / elapsed, cpu_percent=100 * cpu / elapsed,
        ended=len(statuses), statuses=statuses, all_waiting=waiting,
        polls_on_time=sum(1 for gap in gaps if gap <= POLL_DEADLINE) / len(gaps),
        gap_p99_s=fleet.percentile(gaps, 0.99),
        **lag.stop(),
    )  # fmt: skip
    if late:
        requests_before = await asyncio.to_thread(emulator_process.requests_served, url)
        cpu_before, started = time.process_time(), time.monotonic()
        for trigger in fleet.make_triggers(kind, names[count:], kubeconfig):
            tasks.append(asyncio.create_task(fleet.first_event(trigger)))
            await asyncio.sleep(0)  # one after another, each into a watch that has listed already
        settled = await fleet.settle(kind, names, polls)
        fleet.report(
            event="late", pods=late, settled=settled, seconds=time.monotonic() - started,
            cpu_s=time.process_time() - cpu_before,
            requests=await asyncio.to_thread(emulator_process.requests_served, url) - requests_before,
        )  # fmt: skip
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# --- the benchmark -------------------------------------------------------------------------------


def run_step(kind: str, count: int, late: int, window: float, kubeconfig: Path, url: str, folder: Path) -> list[Any]:
    """One step in a fresh triggerer process: its reports (the step, then the late arrivals)."""
    log = folder / f"triggerer-{kind}-{count}.log"
    process = fleet.child(
        Path(__file__), log, "--triggerer", kind, "--pods", str(count), "--late", str(late), "--window", str(window),
        "--kubeconfig", str(kubeconfig), "--url", url,
    )  # fmt: skip
    marks = list(fleet.read_marks(process))
    if process.wait(120) != 0 or not marks:
        raise RuntimeError(fleet.ended_badly(process, log))
    step = marks[0]
    print(f"  {kind}: {count:,} pods, CPU {step['cpu_percent']:.0f}%, {'held' if held(kind, step)[0] else 'not held'}")
    return marks


def run_kind(
    kind: str, steps: list[int], late: int, window: float, kubeconfig: Path, url: str, folder: Path
) -> dict[str, Any]:
    """Every step of one kind, the official one up to the first it does not hold."""
    rows, late_row = [], None
    for count in steps:
        marks = run_step(kind, count, late if count == steps[-1] else 0, window, kubeconfig, url, folder)
        rows.append(marks[0])
        late_row = marks[1] if len(marks) > 1 else late_row
        if kind == "official" and not held(kind, marks[0])[0]:
            break
    return {"steps": rows, "late": late_row}


def print_results(results: dict[str, dict[str, Any]], window: float) -> None:
    labels = {"official": "KubernetesPodTrigger", "ours": "GPUPodTrigger"}
    print(
        f"{'trigger':<22}{'pods':>7}{'held':>6}{'take-up s':>11}{'API req/s':>11}{'asked':>7}{'CPU %':>7}"
        f"{'CPU %/1k':>10}{'RSS MiB':>9}{'+MiB/1k':>9}{'lag p99 s':>11}{'poll gap p99 s':>16}"
    )
    for kind in ("official", "ours"):
        for step in results[kind]["steps"]:
            thousands = step["pods"] / 1000
            asked = f"{step['pods'] / fleet.POLL_INTERVAL:.0f}" if kind == "official" else "0"
            print(
                f"{labels[kind]:<22}{step['pods']:>7,}{'yes' if held(kind, step)[0] else 'NO':>6}"
                f"{step['take_up_s']:>11.1f}{step['requests_per_second']:>11.1f}{asked:>7}{step['cpu_percent']:>7.1f}"
                f"{step['cpu_percent'] / thousands:>10.1f}{step['rss_mib']:>9.0f}"
                f"{(step['rss_mib'] - step['baseline_mib']) / thousands:>9.1f}{step['lag_p99_s']:>11.3f}"
                f"{(format(step['gap_p99_s'], '.1f') if kind == 'official' else '-'):>16}"
            )
    baseline = results["ours"]["steps"][0]["baseline_mib"]
    print(f"""
Each step is a fresh triggerer process that takes up all its triggers at once. take-up: from creating
the triggers to all of them waiting. CPU is over a {window:g} s window once every trigger waits; RSS is the
process's resident memory after it, +MiB/1k its growth over the process before any trigger ({baseline:.0f} MiB
with Airflow and the providers imported) per 1,000 pods. asked: the GETs/s a 2 s poll interval asks
for; poll gap: the time between two reads of one pod. lag: how late the event loop woke a 100 ms
timer. Held: every trigger still waits, CPU below 90% of a core, and (official) 99% of its polls no
more than one interval late (a gap of 4 s at most).""")
    official = results["official"]["steps"]
    kept = [s["pods"] for s in official if held("official", s)[0]]
    ceiling = f"{max(kept):,} pods" if kept else f"below {official[0]['pods']:,} pods"
    failed = next((s for s in official if not held("official", s)[0]), None)
    after = f"; at {failed['pods']:,}: {held('official', failed)[1]}" if failed else " (it held every step run)"
    print(f"\nKubernetesPodTrigger's ceiling on this machine: {ceiling}{after}.")
    ours = results["ours"]["steps"]
    top = max((s for s in ours if held("ours", s)[0]), key=lambda s: s["pods"], default=None)
    if top is None:
        print("GPUPodTrigger held none of its steps.")
    else:
        thousands = top["pods"] / 1000
        largest = max(s["pods"] for s in ours)
        met = "yes" if top["pods"] >= GOAL_PODS else ("NO" if largest >= GOAL_PODS else "not run to it")
        print(
            f"GPUPodTrigger held {top['pods']:,} pods (goal {GOAL_PODS:,}: {met}): "
            f"{(top['rss_mib'] - top['baseline_mib']) / thousands:.1f} MiB and {top['cpu_percent'] / thousands:.2f}% "
            f"CPU per 1,000 pods, {top['requests_per_second']:.1f} API requests/s."
        )
    late = results["ours"]["late"]
    if late:
        print(
            f"{late['pods']} more GPUPodTrigger arriving one by one after the watch had listed took "
            f"{late['seconds']:.1f} s to all wait: {1000 * late['cpu_s'] / late['pods']:.0f} ms of CPU and "
            f"{late['requests'] / late['pods']:.1f} API requests each (the watch keeps the pods it listed, so a "
            "late trigger finds its pod there; a GET only for a pod it did not have)"
            + ("." if late["settled"] else "; not all of them waited after 300 s.")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="ours to 2,000 pods, official to 100, 8 s windows")
    parser.add_argument("--window", type=float, help="seconds measured per step (15; 8 with --quick)")
    parser.add_argument("--ours", help="GPUPodTrigger steps, e.g. 1000,2000,5000,10000")
    parser.add_argument("--official", help="KubernetesPodTrigger steps, e.g. 25,50,100,200,400,800")
    parser.add_argument("--late", type=int, default=LATE, help="GPUPodTrigger arriving late at the top step")
    parser.add_argument("--triggerer", choices=["ours", "official"], help=argparse.SUPPRESS)  # a step's process
    parser.add_argument("--pods", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    window = args.window or (QUICK_WINDOW if args.quick else 15.0)
    if args.triggerer:
        asyncio.run(triggerer(args.triggerer, args.pods, args.late, window, Path(args.kubeconfig), args.url))
        return
    ours = [int(n) for n in args.ours.split(",")] if args.ours else list(QUICK_OURS if args.quick else OURS_STEPS)
    official = (
        [int(n) for n in args.official.split(",")]
        if args.official
        else list(QUICK_OFFICIAL if args.quick else OFFICIAL_STEPS)
    )
    pods = max(*ours, *official) + args.late
    folder = Path(tempfile.mkdtemp(prefix="bench-capacity-"))
    nodes = fleet.nodes_for(pods)
    emulator, kubeconfig, url = fleet.start_emulator(folder, nodes)
    try:
        took = fleet.create_pods(kubeconfig, [f"shard-{i}" for i in range(pods)])
        print(f"{pods:,} simulated GPU pods Running in {took:.1f} s on a scale cluster of {nodes:,} nodes", flush=True)
        results = {
            "official": run_kind("official", official, 0, window, kubeconfig, url, folder),
            "ours": run_kind("ours", ours, args.late, window, kubeconfig, url, folder),
        }
    finally:
        emulator.terminate()
        emulator.wait(60)
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nMachine: {fleet.machine()}. The emulator and each triggerer in processes of their own.\n")
    print_results(results, window)


if __name__ == "__main__":
    main()
