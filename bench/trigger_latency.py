"""Pod terminal event -> trigger event, p50/p99: ``GPUPodTrigger`` next to the official ``KubernetesPodTrigger``.

N running GPU pods of the Kubernetes emulator in scale mode (its own process, simulated containers)
are each waited on by one trigger in a triggerer process (one event loop, as Airflow's triggerer).
Once every trigger waits, the benchmark ends the pods' workloads through the emulator
(``POST /_emulator/finish``), spread evenly over ``--spread`` seconds, and each pod goes
``Succeeded``. The latency of a pod is from the moment the emulator recorded it ``Succeeded``
(``GET /_emulator/phase-times``, ``time.time()`` to the microsecond) to the moment its trigger
yielded its ``TriggerEvent`` (``time.time()`` in the triggerer process, on the same host). It leaves
out Airflow's own scheduling of the resumed task, which is the same for both triggers.

For ``GPUPodTrigger`` it splits each latency in three legs (``LEGS``): the emulator's, from recording
``Succeeded`` to its watch writing that event to the socket (``sent`` in ``/_emulator/phase-times``);
the way to the triggerer, until its shared watch read and decoded that line (``fleet.WatchClock``);
the trigger's, from there to its event. The trigger's leg is below zero where it fired on the
container's termination, which the emulator writes in the change just before the phase. It also
says how long each process waited, runnable, for a core (``/proc/PID/schedstat``): on a shared
machine, a process at 25 % CPU may be one that gets no more, not one that needs no more.

``GPUPodTrigger`` holds its event until 10 s after its deferral (``triggers/resume_dwell.py``, the
workaround for apache/airflow#72716): both kinds are deferred an hour before, so that hold never
counts here. A trigger whose event has not come ``--cap`` seconds after the last pod ended is
counted as missed, and its latency as at least that.

    python bench/trigger_latency.py               # 25 pods (the official trigger's ceiling here) and 500
    python bench/trigger_latency.py --quick       # 200 pods
    python bench/trigger_latency.py --pods 10000 --kinds ours   # 10,000 held, all ending
"""

from __future__ import annotations

import os

os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "ERROR")

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import fleet

COUNTS = (25, 500)
QUICK_COUNTS, QUICK_CAP = (200,), 60.0
GOAL_P99 = 1.0


def pod_names(kind: str, count: int) -> list[str]:
    """The pods of one run: a set of its own per kind and count."""
    return [f"{kind}-{count}-{i}" for i in range(count)]


# --- the triggerer process -----------------------------------------------------------------------


async def triggerer(kind: str, names: list[str], ending: int, cap: float, kubeconfig: Path) -> None:
    """Wait on every pod; say when all wait; report when each of the first ``ending`` triggers fired
    (up to ``cap`` s after the benchmark says the last of those pods ended, on stdin) and the CPU
    this process spent from the first end to the last event."""
    polls = fleet.PollClock() if kind == "official" else None
    watch = fleet.WatchClock() if kind == "ours" else None
    tasks = {name: asyncio.create_task(fleet.first_event(t)) for name, t in zip(
        names, fleet.make_triggers(kind, names, kubeconfig), strict=True)}  # fmt: skip
    fleet.report(event="ready", all_waiting=await fleet.settle(kind, names, polls))
    cpu, started, (_, waited) = time.process_time(), time.monotonic(), fleet.schedstat()
    await asyncio.to_thread(input)  # the benchmark's "all ended" line
    awaited = [tasks[name] for name in names[:ending]]
    await asyncio.wait(awaited, timeout=cap)
    took = time.monotonic() - started
    cpu_percent = 100 * (time.process_time() - cpu) / took
    wait_percent = 100 * (fleet.schedstat()[1] - waited) / took
    fired, statuses = {}, {}
    for name, task in tasks.items():
        if task.done() and not task.exception():
            payload, when = task.result()
            fired[name], statuses[name] = when, payload.get("status")
        task.cancel()
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    read = watch.read if watch is not None else {}
    fleet.report(
        event="fired", fired=fired, statuses=statuses, cpu_percent=cpu_percent, wait_percent=wait_percent, read=read
    )


# --- the benchmark -------------------------------------------------------------------------------


def measure(
    kind: str,
    names: list[str],
    ending: int,
    spread: float,
    cap: float,
    url: str,
    kubeconfig: Path,
    folder: Path,
    emulator: int,
) -> dict[str, Any]:
    """One run: ``names`` waited on, the first ``ending`` of them ended over ``spread`` seconds."""
    log = folder / f"latency-{kind}-{len(names)}.log"
    process = fleet.child(
        Path(__file__), log, "--triggerer", kind, "--count", str(len(names)), "--ending", str(ending),
        "--cap", str(cap), "--kubeconfig", str(kubeconfig),
    )  # fmt: skip
    marks = fleet.read_marks(process)
    ready = next(marks, {})
    if ready.get("event") != "ready":
        raise RuntimeError(fleet.ended_badly(process, log))
    if not ready["all_waiting"]:
        print(f"  ({kind}, {len(names)} pods: not every trigger was polling after 300 s; the pods end all the same)")
    batches = max(1, int(spread * 10))  # a batch every 100 ms
    started, (emulator_ran, emulator_waited) = time.monotonic(), fleet.schedstat(emulator)
    for i in range(batches):
        batch = names[i * ending // batches : (i + 1) * ending // batches]
        if batch:
            fleet.finish(url, batch)
        time.sleep(max(0.0, started + (i + 1) * spread / batches - time.monotonic()))
    assert process.stdin is not None
    process.stdin.write("ended\n")  # every pod has ended: the triggerer waits ``cap`` s more at most
    process.stdin.flush()
    result = next(marks, None)
    ran, waited = fleet.schedstat(emulator)
    took = time.monotonic() - started
    if result is None or process.wait(120) != 0:
        raise RuntimeError(fleet.ended_badly(process, log))
    times = fleet.succeeded_and_sent(url)
    fired = [name for name in names[:ending] if name in result["fired"]]
    latencies = [result["fired"][name] - times[name][0] for name in fired]
    missed = ending - len(latencies)
    latencies += [cap] * missed  # at least that
    statuses = sorted(set(result["statuses"].values()))
    return {"p50": fleet.percentile(latencies, 0.5), "p99": fleet.percentile(latencies, 0.99),
            "max": max(latencies), "missed": missed, "statuses": statuses, "held": len(names), "ending": ending,
            "cpu_percent": result["cpu_percent"], "wait_percent": result["wait_percent"],
            "emulator_cpu": 100 * (ran - emulator_ran) / took, "emulator_wait": 100 * (waited - emulator_waited) / took,
            "split": split(fired, times, result["read"], result["fired"])}  # fmt: skip


#: The legs of a latency: the emulator's (Succeeded recorded -> its watch wrote the event), the way to
#: the triggerer's shared watch (written -> read and decoded there), the trigger's (-> its event).
LEGS = ("emulator", "to watch", "trigger")


def split(
    names: list[str], times: dict[str, tuple[float, float | None]], read: dict[str, float], fired: dict[str, float]
) -> dict[str, tuple[float, float]] | None:
    """p50 and p99 of each leg, over the pods whose every timestamp is known (None for the official
    trigger, which reads no watch)."""
    known = [n for n in names if times[n][1] is not None and n in read]
    if not known:
        return None
    legs = [
        [times[n][1] - times[n][0] for n in known],  # type: ignore[operator]
        [read[n] - times[n][1] for n in known],  # type: ignore[operator]
        [fired[n] - read[n] for n in known],
    ]
    return {leg: (fleet.percentile(v, 0.5), fleet.percentile(v, 0.99)) for leg, v in zip(LEGS, legs, strict=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 pods, a 60 s cap")
    parser.add_argument("--pods", help="pod counts to run, each for both kinds (default 25,500)")
    parser.add_argument("--kinds", default="official,ours", help="which triggers to run: official, ours or both")
    parser.add_argument("--ending", type=int, help="how many of the pods end (default all)")
    parser.add_argument("--spread", type=float, default=10.0, help="seconds over which the pods end")
    parser.add_argument("--cap", type=float, help="seconds to wait for events after the last pod ended (180)")
    parser.add_argument("--triggerer", choices=["ours", "official"], help=argparse.SUPPRESS)  # the child process
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cap = args.cap or (QUICK_CAP if args.quick else 180.0)
    if args.triggerer:
        names = pod_names(args.triggerer, args.count)
        asyncio.run(triggerer(args.triggerer, names, args.ending, cap, Path(args.kubeconfig)))
        return
    counts = [int(n) for n in args.pods.split(",")] if args.pods else list(QUICK_COUNTS if args.quick else COUNTS)
    kinds = [kind for kind in ("official", "ours") if kind in args.kinds.split(",")]
    sets = {(kind, count): pod_names(kind, count) for count in counts for kind in kinds}
    folder = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    total = sum(len(names) for names in sets.values())
    emulator, kubeconfig, url = fleet.start_emulator(folder, fleet.nodes_for(total))
    try:
        took = fleet.create_pods(kubeconfig, [name for names in sets.values() for name in names])
        print(f"{total:,} simulated GPU pods Running in {took:.1f} s (a set of its own per run)", flush=True)
        results = {}
        for (kind, count), names in sets.items():
            ending = min(args.ending or count, count)
            results[kind, count] = measure(kind, names, ending, args.spread, cap, url, kubeconfig, folder, emulator.pid)
            row = results[kind, count]
            print(f"  {kind}, {count} pods: p50 {row['p50']:.3f} s, p99 {row['p99']:.3f} s", flush=True)
    finally:
        emulator.terminate()
        emulator.wait(60)
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nMachine: {fleet.machine()}. The emulator and each triggerer in processes of their own.")
    print(f"Pods end evenly over {args.spread:g} s; latency from the emulator recording Succeeded to the TriggerEvent.")
    print("Both kinds deferred an hour before: GPUPodTrigger's 10 s resume dwell (apache/airflow#72716) never counts.")
    columns = f"{'held':>7}{'ending':>8}{'p50 s':>9}{'p99 s':>9}{'max s':>9}{'missed':>8}{'CPU %':>7}{'wait %':>8}"
    print(f"\n{'trigger':<24}{columns}  events")
    labels = {"official": "KubernetesPodTrigger", "ours": "GPUPodTrigger"}
    for (kind, _), row in results.items():
        print(
            f"{labels[kind]:<24}{row['held']:>7,}{row['ending']:>8,}{row['p50']:>9.3f}{row['p99']:>9.3f}"
            f"{row['max']:>9.3f}{row['missed']:>8}{row['cpu_percent']:>7.0f}{row['wait_percent']:>8.0f}"
            f"  {', '.join(row['statuses'])}"
        )
    print(f"\nmissed: no event within {cap:g} s of the last pod's end (its latency then counts as {cap:g} s).")
    print("CPU: the triggerer process's, from the first pod's end to the last event; wait: the time it was")
    print("runnable but waited for a core (/proc/PID/schedstat): a loaded machine gives it no more CPU than that.")
    for (kind, count), row in results.items():
        print(
            f"Emulator during {labels[kind]}, {count:,}: CPU {row['emulator_cpu']:.0f} %, "
            f"waited for a core {row['emulator_wait']:.0f} %."
        )
    splits = [(kind, count, row["split"]) for (kind, count), row in results.items() if row["split"]]
    if splits:
        print("\nWhere it goes, p50 / p99 s: the emulator (Succeeded -> its watch wrote it), on to the triggerer's")
        print("watch (-> read and decoded), the trigger (-> its event; below 0: it fired on the container's end):")
        for kind, count, legs in splits:
            parts = ", ".join(f"{leg} {p50:.3f} / {p99:.3f}" for leg, (p50, p99) in legs.items())
            print(f"{labels[kind]:<16}{count:>7,}  {parts}")
    ours = [row["p99"] for (kind, _), row in results.items() if kind == "ours"]
    if ours:
        met = "yes" if max(ours) <= GOAL_P99 else "NO"
        print(f"GPUPodTrigger p99 {max(ours):.3f} s at most (goal <= {GOAL_P99:g} s: {met}).")


if __name__ == "__main__":
    main()
