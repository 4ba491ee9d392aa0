"""A mapped GPU DAG of N shards end to end through a real Airflow, 10% of the shards preempted.

Ours: ``GPUKubernetesOperator.partial(...).expand(...)``, deferrable: the triggerer replaces a
preempted pod itself, inside the same task try. Baseline, on the same Airflow: the same DAG with the
official ``KubernetesPodOperator`` (deferrable; ``--sync`` adds it not deferrable) and
``retries=2``: a preempted pod fails the try and Airflow's retry makes the next pod. The DAGs are in
bench/mapped_fanout_dags.py; each side has a Kubernetes emulator of its own (in this process: spot
H100 nodes, simulated containers, so that N pods need no process each). The sides run one after the
other on one Airflow (api-server, scheduler, dag-processor, triggerer, LocalExecutor on SQLite).

The preemption schedule is the same on every side: ``--preempt`` of the shards (10%), chosen by a
seeded RNG, each preempted once (``ClusterState.preempt``: the graceful node shutdown of a spot node)
a seeded 20-60% of ``--seconds`` after its first pod is Running. What is reported, per side:

- wall time from the trigger of the DAG run (the REST call) to its ``end_date``;
- shards succeeded / failed, task tries (REST API), the scheduler's apache/airflow#72716 lines;
- duplicates: two live pods of one shard at any moment, from every pod's history as the emulator's
  store recorded it (created; Succeeded, Failed or deleted ends it), keyed by the ``map_index`` label;
  and shards whose pods Succeeded more than once;
- API requests by verb over the run (the emulator's ``/metrics``, ``apiserver_request_total``);
- whether the reduce's sum is right; seconds from each preemption to the shard's next pod Running;
- CPU seconds of the triggerer and of all Airflow parts over the run.

    python bench/mapped_fanout.py                 # 200 shards, ours and the deferrable baseline
    python bench/mapped_fanout.py --quick         # 20 shards, for working on this script
    python bench/mapped_fanout.py --sync          # also the baseline not deferrable
    python bench/mapped_fanout.py --sides baseline,ours   # the other order

On a machine shared with other work the wall times follow its load: the report gives, per side, the
shard tasks' runs on a worker and the median time each took to parse the DAG file there (the same
file on every side), and the CPU seconds of every Airflow part; compare runs in both orders.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from airflow_gpu.testing.airflow_stack import AirflowStack
from airflow_gpu.testing.kubernetes.cluster import ClusterSpec, NodeSpec
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.utils.results import INTERRUPTIONS_XCOM_KEY
from spot_recovery import STALE_EVENT, Case, Clock, connect, machine, versions

DAGS_FILE = Path(__file__).resolve().parent / "mapped_fanout_dags.py"
QUICK_SHARDS = 20
DAGBAG_IMPORT_TIMEOUT = 300
GPUS_PER_NODE = 8
TERMINAL = ("Succeeded", "Failed")
LABELS = {"ours": "ours (GPUKubernetesOperator, deferrable)", "baseline": "baseline (KPO, deferrable)",
          "baseline_sync": "baseline (KPO, sync)"}  # fmt: skip
COLUMNS = {"ours": "ours, deferrable", "baseline": "KPO, deferrable", "baseline_sync": "KPO, sync"}


def cluster(shards: int) -> ClusterSpec:
    """Spot H100 nodes (8 GPUs each) for every shard and every replacement, with room to spare."""
    nodes = math.ceil(shards * 1.25 / GPUS_PER_NODE) + 1
    return ClusterSpec(
        "mapped-fanout",
        tuple(
            NodeSpec(f"h100-spot-{i}", "H100-80GB-SXM:8", "spot", "p5.48xlarge", {"cpu": "192", "memory": "2048Gi"})
            for i in range(1, nodes + 1)
        ),
    )


def preemption_plan(shards: int, ratio: float, seconds: float, seed: int) -> dict[int, float]:
    """Shard -> seconds after its first pod is Running at which it is preempted; the same on every side."""
    rng = random.Random(seed)
    chosen = sorted(rng.sample(range(shards), round(shards * ratio)))
    return {shard: round(rng.uniform(0.2, 0.6) * seconds, 2) for shard in chosen}


# --- what happened to every pod -----------------------------------------------------------------


@dataclass
class PodLife:
    """One pod, as the emulator's store saw it (``time.time()`` values)."""

    name: str
    shard: int | None
    try_number: str | None
    created: float
    running: float | None = None
    ended: float | None = None  # first seen Succeeded or Failed
    deleted: float | None = None
    phase: str = ""
    succeeded: bool = False

    @property
    def live_until(self) -> float:
        """A pod is live from its creation until it ends or is deleted, whichever comes first."""
        ends = [t for t in (self.ended, self.deleted) if t is not None]
        return min(ends) if ends else math.inf


def overlaps(pods: list[PodLife]) -> dict[int, float]:
    """Shard -> the longest time two of its pods were live at once, for each shard where that happened."""
    by_shard: dict[int, list[PodLife]] = {}
    for pod in pods:
        if pod.shard is not None:
            by_shard.setdefault(pod.shard, []).append(pod)
    found: dict[int, float] = {}
    for shard, lives in by_shard.items():
        lives.sort(key=lambda p: p.created)
        latest_end = -math.inf
        for pod in lives:
            if pod.created < latest_end:
                overlap = min(latest_end, pod.live_until) - pod.created
                found[shard] = max(found.get(shard, 0.0), overlap)
            latest_end = max(latest_end, pod.live_until)
    return found


@dataclass
class Preemption:
    shard: int
    pod: str
    at: float | None = None  # None: skipped (``skipped`` says why)
    skipped: str = ""


class PodRecorder:
    """Records every pod of one emulator from its store, and preempts the planned shards.

    The listener runs on the emulator's event loop, as the store changes: nothing it records costs
    an API request. A planned shard's first pod is preempted once, ``plan[shard]`` seconds after it
    was first seen Running, on that loop (``ClusterState.preempt``, what ``KubernetesEmulator.preempt``
    calls)."""

    def __init__(self, emulator: KubernetesEmulator, plan: dict[int, float]) -> None:
        assert emulator.state is not None, "the emulator is not running"
        self.state = emulator.state
        self.plan = plan
        self.pods: dict[str, PodLife] = {}  # uid -> its life
        self.preemptions: list[Preemption] = []
        self._planned: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.state.store.subscribe(self._observe)

    def _observe(self, plural: str, event: str, obj: dict[str, Any]) -> None:
        if plural != "pods":
            return
        now = time.time()
        metadata = obj["metadata"]
        life = self.pods.get(metadata["uid"])
        if life is None:
            labels = metadata.get("labels") or {}
            shard = labels.get("map_index")
            life = self.pods[metadata["uid"]] = PodLife(
                metadata["name"], int(shard) if shard is not None else None, labels.get("try_number"), now
            )
        if event == "DELETED":
            life.deleted = life.deleted or now
            return
        life.phase = (obj.get("status") or {}).get("phase") or life.phase
        if life.phase == "Running" and life.running is None:
            life.running = now
            if life.shard in self.plan and life.shard not in self._planned:
                self._planned.add(life.shard)
                self._schedule(life.shard, life.name, self.plan[life.shard])
        if life.phase in TERMINAL and life.ended is None:
            life.ended = now
            life.succeeded = life.phase == "Succeeded"

    def _schedule(self, shard: int, pod: str, delay: float) -> None:
        loop = asyncio.get_running_loop()

        def start() -> None:
            task = loop.create_task(self._preempt(shard, pod))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        loop.call_later(delay, start)

    async def _preempt(self, shard: int, pod: str) -> None:
        found = self.state.store.find("pods", "default", pod)
        phase = ((found or {}).get("status") or {}).get("phase")
        if phase != "Running":
            self.preemptions.append(Preemption(shard, pod, skipped=f"it was {phase or 'gone'} when its time came"))
            return
        at = time.time()
        try:
            await self.state.preempt("default", pod)
        except Exception as error:  # reported; the run goes on
            self.preemptions.append(Preemption(shard, pod, skipped=f"{type(error).__name__}: {error}"))
            return
        self.preemptions.append(Preemption(shard, pod, at))

    def lives(self) -> list[PodLife]:
        return [PodLife(**asdict(p)) for p in list(self.pods.values())]

    def recoveries(self) -> list[float]:
        """Per preemption: seconds until the shard's next pod (created after it) was first Running."""
        lives = self.lives()
        found = []
        for preemption in self.preemptions:
            if preemption.at is None:
                continue
            at = preemption.at
            later = [p.running for p in lives if p.shard == preemption.shard and p.created >= at and p.running]
            if later:
                found.append(min(later) - at)
        return found


# --- one side's run -----------------------------------------------------------------------------


@dataclass
class Side:
    who: str
    dag_id: str
    emulator: KubernetesEmulator
    recorder: PodRecorder
    figures: dict[str, Any] = field(default_factory=dict)


def requests_by_label(url: str) -> Counter[tuple[str, str, str, str]]:
    """``apiserver_request_total`` from ``/metrics``: (verb, resource, subresource, code) -> count."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=30).read().decode()
    counts: Counter[tuple[str, str, str, str]] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, number = line[len("apiserver_request_total{") :].rsplit("} ", 1)
        found = dict(item.split("=", 1) for item in labels.split(","))
        key = tuple(found.get(k, '""').strip('"') for k in ("verb", "resource", "subresource", "code"))
        counts[(key[0], key[1], key[2], key[3])] += int(number)
    return counts


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and its descendants (the living ones, and those their parents reaped)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def airflow_cpu(stack: AirflowStack) -> dict[str, float]:
    """CPU seconds so far per Airflow part (``AirflowStack`` starts them in ``COMPONENTS`` order)."""
    names = ("api-server", "scheduler", "dag-processor", "triggerer")
    return {name: cpu_seconds(process.pid) for name, process in zip(names, stack.processes, strict=False)}


def task_instances(stack: AirflowStack, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every task instance of the run, page by page (the API caps a page at ``[api] maximum_page_limit``)."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    offset = 0
    while True:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100&offset={offset}&order_by=id"
        page = stack.request("GET", path)["task_instances"]
        if not page:
            return list(found.values())
        offset += len(page)
        found.update({(ti["task_id"], ti["map_index"]): ti for ti in page})


def interruptions_recorded(stack: AirflowStack, side: Side, run_id: str, shards: int) -> dict[str, Any]:
    """Ours records each interruption of a shard (XCom ``gpu_interruptions``): exact when the shards with
    one are the preempted shards, each with one."""
    preempted = {p.shard for p in side.recorder.preemptions if p.at is not None}
    counts = {}
    for shard in range(shards):
        recorded = stack.xcom(side.dag_id, run_id, "shard", INTERRUPTIONS_XCOM_KEY, map_index=shard) or []
        if recorded:
            counts[shard] = len(recorded)
    return {"recorded": sum(counts.values()), "exact": counts == dict.fromkeys(preempted, 1)}


def progress(stack: AirflowStack, side: Side, run_id: str) -> str:
    states = Counter(str(ti["state"]) for ti in task_instances(stack, side.dag_id, run_id) if ti["task_id"] == "shard")
    live = sum(1 for p in side.recorder.lives() if p.live_until == math.inf)
    preempted = sum(1 for p in side.recorder.preemptions if p.at is not None)
    return f"{side.who}: shards {dict(sorted(states.items()))}; {live} pods live; {preempted} preempted"


def run_side(stack: AirflowStack, side: Side, shards: int, timeout: float, clock: Clock) -> None:
    import mapped_fanout_dags as dags

    before, cpu_before = requests_by_label(side.emulator.url), airflow_cpu(stack)
    triggered = time.time()
    run_id = stack.trigger(side.dag_id)
    clock.log(f"{side.who}: run {run_id} triggered")
    deadline, state, shown = time.monotonic() + timeout, "queued", 0.0
    while time.monotonic() < deadline:
        state = stack.run_state(side.dag_id, run_id)
        if state in ("success", "failed"):
            break
        if time.monotonic() - shown >= 20:
            clock.log(progress(stack, side, run_id))
            shown = time.monotonic()
        time.sleep(1)
    run = stack.request("GET", f"/api/v2/dags/{side.dag_id}/dagRuns/{run_id}")
    requests = requests_by_label(side.emulator.url) - before
    cpu_after = airflow_cpu(stack)
    clock.log(f"{side.who}: run {state}")
    end = datetime.fromisoformat(run["end_date"]).timestamp() if run.get("end_date") else None
    instances = task_instances(stack, side.dag_id, run_id)
    shard_tis = [ti for ti in instances if ti["task_id"] == "shard"]
    reduce_id = "reduce" if side.who == "ours" else "reduce_from_pods"
    reduced = stack.xcom(side.dag_id, run_id, reduce_id)
    wanted = dags.expected(shards)
    lives = side.recorder.lives()
    duplicates = overlaps(lives)
    successes = Counter(p.shard for p in lives if p.succeeded and p.shard is not None)
    recoveries = side.recorder.recoveries()
    by_verb: Counter[str] = Counter()
    for (verb, _, _, _), count in requests.items():
        by_verb[verb] += count
    side.figures = {
        "run_id": run_id,
        "state": state,
        "wall_seconds": None if end is None else round(end - triggered, 1),
        "shards_succeeded": sum(1 for ti in shard_tis if ti["state"] == "success"),
        "shards_failed": sum(1 for ti in shard_tis if ti["state"] != "success"),
        "task_tries": sum(int(ti["try_number"]) for ti in shard_tis),
        "stale_event_lines": stale_events(stack, side.dag_id),
        "startup_reschedules": startup_reschedules(stack, side.dag_id),
        "worker_runs": worker_runs(stack.home / "logs", side.dag_id),
        "preemptions": sum(1 for p in side.recorder.preemptions if p.at is not None),
        "preemptions_skipped": [asdict(p) for p in side.recorder.preemptions if p.at is None],
        "recovery_seconds": {
            "p50": round(statistics.median(recoveries), 1) if recoveries else None,
            "max": round(max(recoveries), 1) if recoveries else None,
            "count": len(recoveries),
        },
        "pods_created": len(lives),
        "duplicate_shards": len(duplicates),
        "longest_duplicate_seconds": round(max(duplicates.values()), 2) if duplicates else 0.0,
        "shards_succeeded_twice": sum(1 for n in successes.values() if n > 1),
        "pods_left": len(side.emulator.state.store.list("pods", "default")) if side.emulator.state else None,
        "reduce": reduced,
        "reduce_expected": wanted,
        "reduce_correct": isinstance(reduced, dict) and all(reduced.get(k) == v for k, v in wanted.items()),
        "api_requests": sum(requests.values()),
        "api_requests_by_verb": dict(by_verb.most_common()),
        "api_requests_by_resource": {
            f"{verb} {resource}{'/' + sub if sub else ''} {code}": n
            for (verb, resource, sub, code), n in requests.items()
        },
        "cpu_seconds": {k: round(cpu_after.get(k, 0) - v, 1) for k, v in cpu_before.items()},
    }
    if side.who == "ours":
        side.figures["interruptions"] = interruptions_recorded(stack, side, run_id, shards)


def stale_events(stack: AirflowStack, dag_id: str) -> int:
    """Scheduler lines of apache/airflow#72716 (a resumed task failed by a stale executor event) for this DAG."""
    log = stack.home / "logs" / "scheduler.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(1 for line in text.splitlines() if f"<TaskInstance: {dag_id}." in line and STALE_EVENT in line)


def worker_runs(logs: Path, dag_id: str) -> dict[str, Any]:
    """The shard tasks' runs on a worker (first starts, retries and resumes after a deferral), from
    their task logs, and the seconds each spent parsing the DAG file there: the same file on every
    side, so its parse time shows how loaded the machine was while that side ran."""
    runs, parse = 0, []
    for log in (logs / f"dag_id={dag_id}").rglob("attempt=*.log"):
        if "task_id=shard" not in log.parts or not log.name.removeprefix("attempt=").removesuffix(".log").isdigit():
            continue  # the reduce's log, or a trigger's
        for line in log.read_text(errors="replace").splitlines():
            if '"event":"::group::Pre Execute"' in line:
                runs += 1
            elif '"dag_file_parse_ms":' in line:
                parse.append(json.loads(line)["dag_file_parse_ms"] / 1000)
    return {"runs": runs, "parse_seconds_p50": round(statistics.median(parse), 1) if parse else None}


def startup_reschedules(stack: AirflowStack, dag_id: str) -> int:
    """Task starts that Airflow put back (``UP_FOR_RESCHEDULE``): the DAG file did not parse in time."""
    logs = (stack.home / "logs" / f"dag_id={dag_id}").rglob("attempt=*.log")
    return sum(log.read_text(errors="replace").count("Rescheduling task during startup") for log in logs)


# --- the bench ----------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shards", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SHARDS} shards (for working on this script)")
    parser.add_argument("--seconds", type=float, default=45.0, help="how long each shard's workload runs")
    parser.add_argument("--preempt", type=float, default=0.1, help="the share of shards preempted (once each)")
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument(
        "--retry-delay", type=float, default=10.0, help="both sides' retry_delay (Airflow's default: 300 s)"
    )
    parser.add_argument("--parallelism", type=int, default=16, help="[core] parallelism and max_active_tasks_per_dag")
    parser.add_argument(
        "--sides", default="ours,baseline", help="which DAGs run, in this order: ours, baseline, baseline_sync"
    )
    parser.add_argument("--sync", action="store_true", help="also the baseline not deferrable (baseline_sync), last")
    parser.add_argument("--timeout", type=float, default=2400.0, help="seconds a side's run may take")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (Airflow home, logs)")
    args = parser.parse_args()
    if args.quick:
        args.shards = QUICK_SHARDS
    args.sides = [*args.sides.split(","), *(["baseline_sync"] if args.sync else [])]
    if not args.sides or len(set(args.sides)) != len(args.sides) or not set(args.sides) <= set(COLUMNS):
        parser.error(f"--sides: each of {', '.join(COLUMNS)} at most once; got {','.join(args.sides)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the stack and emulators on a kill too
    scratch = Path(tempfile.mkdtemp(prefix="mapped-fanout-"))
    try:
        return run(scratch, args)
    finally:
        if args.keep:
            print(f"scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def run(root: Path, args: argparse.Namespace) -> int:
    settings = {
        "MAPPED_FANOUT_SHARDS": str(args.shards),
        "MAPPED_FANOUT_SECONDS": f"{args.seconds:g}",
        "MAPPED_FANOUT_RETRY_DELAY": f"{args.retry_delay:g}",
    }
    os.environ.update(settings)  # for this process's import of the DAG file too
    os.environ["AIRFLOW_HOME"] = str(root / "bench-airflow-home")  # importing Airflow must not create ~/airflow
    import mapped_fanout_dags as dags

    airflow_settings = {
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(args.parallelism),
        # Each task try parses the DAG file on its worker (about a second of CPU: the KPO import);
        # 16 at once on a loaded 2-core machine passed Airflow's 30 s and were rescheduled.
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": str(DAGBAG_IMPORT_TIMEOUT),
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",  # parse the DAG file once
    }
    plan = preemption_plan(args.shards, args.preempt, args.seconds, args.seed)
    load_at_start = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    who: list[str] = args.sides
    clock = Clock()
    print(
        f"Mapped fan-out: {args.shards} GPU shards end to end through a real Airflow, {len(plan)} preempted", flush=True
    )
    sides: list[Side] = []
    with contextlib.ExitStack() as exits:
        for name in who:
            emulator = exits.enter_context(KubernetesEmulator(cluster(args.shards)))
            emulator.write_kubeconfig(root / f"{name}.kubeconfig")
            sides.append(Side(name, dags.WHO[name], emulator, PodRecorder(emulator, plan)))
        dags_folder = root / "dags"
        dags_folder.mkdir()
        shutil.copy(DAGS_FILE, dags_folder)
        stack = AirflowStack(
            root / "airflow-home", dags_folder, parallelism=args.parallelism, extra_env={**settings, **airflow_settings}
        )
        clock.log(
            f"{len(sides)} emulators up ({len(cluster(args.shards).nodes)} spot H100:8 nodes each); starting Airflow"
        )
        exits.enter_context(stack)
        for side in sides:
            connect(stack, Case(side.who, "kubernetes", "deferrable", side.dag_id, side.emulator, root))
            stack.wait_for_dag(side.dag_id)
        clock.log("DAGs parsed")
        for side in sides:
            run_side(stack, side, args.shards, args.timeout, clock)
        clock.log("all runs ended; stopping Airflow and the emulators")
    figures = {
        "shards": args.shards,
        "preempted": len(plan),
        "preemption_plan": plan,
        "seconds": args.seconds,
        "seed": args.seed,
        "retries": dags.RETRIES,
        "retry_delay": args.retry_delay,
        "grace_seconds": dags.GRACE_SECONDS,
        "poll_interval": dags.POLL_INTERVAL,
        "parallelism": args.parallelism,
        "max_active_tasks_per_dag": args.parallelism,
        "dagbag_import_timeout": DAGBAG_IMPORT_TIMEOUT,
        "versions": versions(),
        "machine": f"{machine()}; {load_at_start} at the start",
        "bench_seconds": round(time.monotonic() - clock.start),
        "sides": {side.who: side.figures for side in sides},
    }
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str))
    report(figures)
    ours = figures["sides"].get("ours")
    met = ours is None or (ours["shards_failed"] == 0 and ours["duplicate_shards"] == 0 and ours["reduce_correct"])
    return 0 if met else 1


def report(figures: dict[str, Any]) -> None:
    sides: dict[str, dict[str, Any]] = figures["sides"]
    print()
    print(f"Versions: {figures['versions']}; Python {platform.python_version()}")
    print(f"Machine: {figures['machine']}")
    print(
        f"Airflow: one scheduler, one triggerer ([triggerer] capacity 1000), LocalExecutor, [core] parallelism"
        f" {figures['parallelism']}, max_active_tasks_per_dag {figures['max_active_tasks_per_dag']} (deferred tasks"
        f" hold no executor slot), dagbag_import_timeout {figures['dagbag_import_timeout']} s, SQLite in WAL mode;"
        " the sides ran one after the other on it, in the order of the columns"
    )
    print(
        f"Shards: {figures['shards']} simulated containers of {figures['seconds']:g} s on H100:1 of spot nodes;"
        f" {figures['preempted']} preempted once each (seed {figures['seed']}), 20-60% of the way into their"
        " first pod, at the same offsets on every side"
    )
    print(
        f"Both: retries={figures['retries']}, retry_delay={figures['retry_delay']:g} s (Airflow's default is 300 s),"
        f" termination grace {figures['grace_seconds']} s, poll_interval={figures['poll_interval']} s"
    )
    print("Goal: ours: all shards succeed, 0 duplicates; wall time and API requests reported")
    print()
    rows: list[tuple[str, Any]] = [
        ("run", "state"),
        ("wall time, trigger -> run end (s)", "wall_seconds"),
        ("shards succeeded", "shards_succeeded"),
        ("shards failed", "shards_failed"),
        ("task tries (shards)", "task_tries"),
        ("#72716 stale-event lines", "stale_event_lines"),
        ("task starts rescheduled (DAG import timeout)", "startup_reschedules"),
        ("shard runs on a worker (starts + resumes)", lambda f: f["worker_runs"]["runs"]),
        ("  DAG file parse on the worker, p50 (s)", lambda f: f["worker_runs"]["parse_seconds_p50"]),
        ("preemptions injected", "preemptions"),
        ("preemption -> next pod Running, p50 (s)", lambda f: f["recovery_seconds"]["p50"]),
        ("preemption -> next pod Running, max (s)", lambda f: f["recovery_seconds"]["max"]),
        ("interruptions recorded (XCom), exact", _interruptions),
        ("pods created", "pods_created"),
        ("duplicates (shards with 2 live pods)", "duplicate_shards"),
        ("shards Succeeded twice", "shards_succeeded_twice"),
        ("pods left at the end", "pods_left"),
        ("reduce result correct", lambda f: "yes" if f["reduce_correct"] else f"NO: {f['reduce']}"),
        ("API requests", "api_requests"),
        *[(f"  {verb}", _verb(verb)) for verb in _verbs(sides)],
        ("triggerer CPU (s)", lambda f: f["cpu_seconds"].get("triggerer")),
        ("all Airflow parts CPU (s)", lambda f: round(sum(f["cpu_seconds"].values()), 1)),
    ]
    width = 26
    print(f"{'':<46}" + "".join(f"{COLUMNS[who]:>{width}}" for who in sides))
    for title, key in rows:
        cells = [key(f) if callable(key) else f.get(key) for f in sides.values()]
        print(f"{title:<46}" + "".join(f"{'n/a' if c is None else str(c):>{width}}" for c in cells))
    for who, f in sides.items():
        reduce_requests = (f.get("reduce") or {}).get("requests") if isinstance(f.get("reduce"), dict) else None
        if reduce_requests:
            print(f"{LABELS[who]}: of its API requests, its reduce made {reduce_requests} (KPO has no XCom here)")
        for skipped in f["preemptions_skipped"]:
            print(f"{LABELS[who]}: preemption of shard {skipped['shard']} skipped: {skipped['skipped']}")
    print(f"({figures['bench_seconds']} s in all)")


def _interruptions(f: dict[str, Any]) -> str:
    found = f.get("interruptions")
    return "n/a" if found is None else f"{found['recorded']}, {'yes' if found['exact'] else 'NO'}"


def _verbs(sides: dict[str, dict[str, Any]]) -> list[str]:
    found: Counter[str] = Counter()
    for f in sides.values():
        found.update(f["api_requests_by_verb"])
    return [verb for verb, _ in found.most_common()]


def _verb(verb: str) -> Any:
    return lambda f: f["api_requests_by_verb"].get(verb, 0)


if __name__ == "__main__":
    raise SystemExit(main())
