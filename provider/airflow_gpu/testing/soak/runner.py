"""``make soak`` / ``python -m airflow_gpu.testing.soak``: run the soak, judge it, write the report.

The fault window lasts ``--minutes`` (at most 30); DAG runs are triggered one after another on each
soak DAG while it is open; then the last runs are waited for (``--drain-minutes``), the grace
period passes, and the history is judged. The exit status is 1 when an invariant is violated:
the seed, the faults around each violation and the command that replays it are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import urllib.error
import urllib.parse
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_gpu.testing.soak import invariants, soak_dags
from airflow_gpu.testing.soak.faults import KINDS, Context, Fault, Injector
from airflow_gpu.testing.soak.observer import Observer
from airflow_gpu.testing.soak.report import page, summary, text
from airflow_gpu.testing.soak.soak_dags import (
    ACCELERATE,
    EPOCH_SECONDS,
    EPOCHS,
    FANOUT,
    PORTS_PER_DAG,
    RETRIES,
    TRAINING,
    expected_shard,
)
from airflow_gpu.testing.soak.stack import PASSWORD, TASK_QUEUED_TIMEOUT, SoakStack, Supervisor, soak_stack
from airflow_gpu.testing.soak.trigger_logs import last_trigger_lines

MAX_MINUTES = 30.0
FINISHED = ("success", "failed")
#: With ``--each``: how long the window stays open past its end while a kind has not been applied. The slice's
#: Batch reclaims, drawn late, found no Batch training RUNNING on spot twice in a row beside the suite (the
#: trainings marked failed or cleared just before); a kind that found nothing proves nothing.
OVERTIME_SECONDS = 90.0
#: The least time left of the drain for a new run of a two-machine training DAG short of its successes.
DRAIN_ROOM_SECONDS = 120.0
DAGS = (*FANOUT, *TRAINING, *ACCELERATE)


def run_port(dag_id: str, earlier_runs: int) -> int:
    """Each training run's own rendezvous port, cycling through the DAG's range. Every emulated machine
    is this host: a run marked success or failed while deferred keeps its Job until the trigger's
    cleanup deletes it, and the next run, started at once, found its main machine's port still held
    (a real pod has an address of its own, so a fixed port is what users run)."""
    return ACCELERATE[dag_id] + earlier_runs % PORTS_PER_DAG


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


class Runs:
    """One active run per soak DAG while the fault window is open; each run's start, end and state."""

    def __init__(
        self, soak: SoakStack, shards: int, rows: int, epoch_seconds: float = EPOCH_SECONDS, accelerate_runs: int = 0,
        dags: tuple[str, ...] = DAGS,
    ) -> None:  # fmt: skip
        self.soak, self.shards, self.rows, self.epoch_seconds = soak, shards, rows, epoch_seconds
        self.dags = dags  # the DAGs run (``--dags``: the slice runs some)
        #: Runs of each two-machine training DAG until this many succeeded (0: no limit), ``--accelerate-runs``.
        self.accelerate_runs = accelerate_runs
        self.runs: list[dict[str, Any]] = []
        self.active: dict[str, dict[str, Any]] = {}
        #: Whether a fault marked a run's task success (``marked_success``): a ``success`` run with no result.
        self.marked: Callable[[str, str], bool] = lambda dag_id, run_id: False
        self._no_room: set[str] = set()  # the DAGs whose new run the drain had no time for (logged once)

    def conf(self, dag_id: str) -> dict[str, Any]:
        if dag_id in FANOUT:
            return {"shards": self.shards, "rows": self.rows}
        conf: dict[str, Any] = {"workdir": str(self.soak.workdir / "checkpoints")}
        if dag_id in TRAINING:
            conf["epoch_seconds"] = self.epoch_seconds
        if dag_id in ACCELERATE:
            conf["port"] = run_port(dag_id, self._runs_of(dag_id))
        return conf

    def _runs_of(self, dag_id: str) -> int:
        return sum(run["dag_id"] == dag_id for run in self.runs)

    def _enough(self, dag_id: str) -> bool:
        """No more runs of a two-machine training DAG: ``accelerate_runs`` of them succeeded (not by a fault's
        Mark Success), or three times as many started. A run marked failed or success by a fault leaves no
        training result to judge: the slice in CI's make test, slower than here, once ended with none, and a
        judge with nothing to judge proves nothing. So a DAG short of its successes gets a new run even once
        the window has closed (``tick``), while the last runs are waited for, if there is time left for it:
        with the faults over, it is judged as any other."""
        if dag_id not in ACCELERATE or not self.accelerate_runs:
            return False
        runs = [run for run in self.runs if run["dag_id"] == dag_id]
        succeeded = sum(run.get("state") == "success" and not self.marked(dag_id, run["run_id"]) for run in runs)
        return succeeded >= self.accelerate_runs or len(runs) >= 3 * self.accelerate_runs

    def _room(self, dag_id: str, deadline: float | None, open_window: bool = False) -> bool:
        """Whether a run started now has time to end before ``deadline``, the drain's end (None: no limit). A run
        still going at the judging would be judged an orphan and a run past its bound. While the window is open,
        the DAG's longest run so far must fit: the twenty-third soak's fan-outs took up to 904 s beside the other
        nine DAGs, and one started in the window's last minutes would have ended with the drain or after it.
        After the window (a two-machine training short of its successes) twice that, ``DRAIN_ROOM_SECONDS`` at
        least."""
        if deadline is None:
            return True
        longest = max((run.get("seconds", 0.0) for run in self.runs if run["dag_id"] == dag_id), default=0.0)
        if deadline - time.time() >= (longest if open_window else max(DRAIN_ROOM_SECONDS, 2 * longest)):
            return True
        if dag_id not in self._no_room:
            log(f"no new run of {dag_id}: too little time left before the drain's end for one")
            self._no_room.add(dag_id)
        return False

    def tick(self, open_window: bool, deadline: float | None = None) -> None:
        """Each active run's state; a new run where one ended (open window), or of a two-machine training DAG
        short of its successes (``_enough``), while it has room before ``deadline``, the drain's end (``_room``)."""
        stack = self.soak.stack
        for dag_id in self.dags:
            run = self.active.get(dag_id)
            if run is not None:
                try:
                    state = stack.run_state(dag_id, run["run_id"])
                except (OSError, urllib.error.URLError):
                    continue  # the api-server's database connection was cut: ask again next tick
                run["state"] = state
                if state in FINISHED:
                    run["seconds"] = time.time() - run["started"]
                    log(f"run {dag_id} {run['run_id']} {state} in {run['seconds']:.0f} s")
                    del self.active[dag_id]
            short = dag_id in ACCELERATE and self.accelerate_runs > 0  # see ``_enough``
            if (
                dag_id not in self.active and (open_window or short) and not self._enough(dag_id)
                and self._room(dag_id, deadline, open_window)
            ):  # fmt: skip
                try:
                    run_id = stack.trigger(dag_id, self.conf(dag_id))
                except (OSError, urllib.error.URLError) as error:
                    log(f"trigger {dag_id} failed ({error}); next tick")
                    continue
                run = {"dag_id": dag_id, "run_id": run_id, "started": time.time(), "state": "queued"}
                self.runs.append(run)
                self.active[dag_id] = run


def marked_success(faults: list[Fault], dag_id: str, run_id: str) -> bool:
    """Whether a fault marked a task of that run success (the run then ends ``success`` without its result)."""
    return any(
        f.kind == "mark_success" and f.outcome == "injected" and f.instance is not None
        and f.instance[0] == dag_id and f.instance[2] == run_id
        for f in list(faults)  # a copy: the injector's threads append to it
    )  # fmt: skip


def reap(soak: SoakStack, delete: bool = False) -> tuple[int, str]:
    """``airflow-gpu reap`` as a user runs it, against the soak's Airflow and both emulators."""
    command = [
        str(Path(sys.executable).parent / "airflow-gpu"), "reap", "--output", "json", "--grace", "0",
        "--airflow-url", soak.stack.url, "--airflow-user", "admin",
        "--kubeconfig", str(soak.kubernetes.kubeconfig_path), "--namespace", "default",
        "--endpoint-url", soak.batch.endpoint_url, "--region", soak.batch.region,
    ] + (["--delete"] if delete else [])  # fmt: skip
    env = {**os.environ, "AIRFLOW_GPU_AIRFLOW_PASSWORD": PASSWORD, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing"}  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    try:
        found = json.loads(done.stdout)
    except ValueError:
        return -1, f"reap exited {done.returncode}: {done.stdout[-1000:]} {done.stderr[-2000:]}"
    return len(found["orphans"]), done.stdout


def force_orphan(observer: Observer, soak: SoakStack) -> str | None:
    """A pod with the marks of a finished task try (its labels and annotations as the operator wrote
    them), left running on purpose: the reaper must find it. A single pod's marks: a training Job's
    machine is its Job's to reap (the reaper reaps the Job, not its pods)."""
    finished = sorted(
        (p for p in observer.pods.values() if p.outcome == "Succeeded" and p.marks and not p.group),
        key=lambda p: p.created,
    )
    if not finished:
        return None
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(soak.kubernetes.kubeconfig_path)))
    marks = finished[0].marks
    name = "soak-forced-orphan"
    body = {
        "metadata": {"name": name, "labels": marks["labels"], "annotations": marks["annotations"]},
        "spec": {"containers": [{"name": "base", "image": "python:3.12-slim",
                                 "command": ["python3", "-c", "import time; time.sleep(3600)"]}]},
    }  # fmt: skip
    api.create_namespaced_pod("default", body)
    return name


def collect(soak: SoakStack, runs: list[dict[str, Any]], faults: list[Fault], rows: int) -> dict[str, Any]:
    """Airflow's side, through the REST API: every task instance, and the XComs to judge."""
    stack = soak.stack
    marked = {f.instance for f in faults if f.kind == "mark_success" and f.instance and f.outcome == "injected"}
    instances: list[dict[str, Any]] = []
    expected: dict[Any, Any] = {}
    actual: dict[Any, Any] = {}
    trainings: dict[Any, Any] = {}  # the two-machine trainings' results, judged by their shape
    training_tries: dict[Any, int] = {}  # and the try each came from
    recorded: dict[Any, int] = {}
    stuck: dict[Any, list[tuple[float, str]]] = {}
    for run in runs:
        for ti in stack.task_instances(run["dag_id"], run["run_id"]):
            ti["dag_run_id"] = run["run_id"]
            instances.append(ti)
            instance = (run["dag_id"], ti["task_id"], run["run_id"], ti["map_index"])
            if ti["state"] == "failed":
                stuck[instance] = stuck_events(stack, instance, ti["try_number"])
            if ti["task_id"] not in ("score_shard", "train") or ti["state"] != "success" or instance in marked:
                continue
            value = stack.xcom(run["dag_id"], run["run_id"], ti["task_id"], map_index=ti["map_index"])
            actual[instance] = value
            if run["dag_id"] in ACCELERATE:
                trainings[instance], training_tries[instance] = value, ti["try_number"]
            elif ti["task_id"] == "score_shard":
                expected[instance] = expected_shard(ti["map_index"], rows)
            else:
                expected[instance] = soak_dags.expected_training(EPOCHS)
            items = stack.xcom(run["dag_id"], run["run_id"], ti["task_id"], "gpu_interruptions", ti["map_index"])
            key = (*instance, ti["try_number"])
            recorded[key] = len(items or [])
    return {"instances": instances, "expected": expected, "actual": actual, "trainings": trainings,
            "training_tries": training_tries, "recorded": recorded, "stuck": stuck}  # fmt: skip


def stuck_events(stack: Any, instance: tuple[str, str, str, int], try_number: int) -> list[tuple[float, str]]:
    """The scheduler's stuck-in-queued events of one task try, oldest first, from Airflow's event log:
    each requeue, and the failure once ``num_stuck_in_queued_retries`` is spent; with the try's ``running``
    events, from the last of which Airflow counts the requeues."""
    dag_id, task_id, run_id, map_index = instance
    query = urllib.parse.urlencode(
        [("dag_id", dag_id), ("task_id", task_id), ("run_id", run_id), ("map_index", map_index),
         ("try_number", try_number), ("included_events", invariants.STUCK_REQUEUED),
         ("included_events", invariants.STUCK_FAILED), ("included_events", invariants.RUNNING),
         ("order_by", "when"), ("limit", 100)]
    )  # fmt: skip
    answer = stack.request("GET", f"/api/v2/eventLogs?{query}")
    return [(datetime.fromisoformat(e["when"]).timestamp(), e["event"]) for e in answer["event_logs"]]


def drain_evictions(observer: Observer, faults: list[Fault]) -> dict[Any, int]:
    """The pods a drain evicted, by the names it returned: an eviction the provider may record as an
    interruption. By name, not by the fault's moment: the drain acts after it is drawn (it looks for a busy
    node first), and the eighth soak's drain evicted a pod made 1.6 s after that moment."""
    by_name: dict[str, list[Any]] = defaultdict(list)
    for pod in observer.pods.values():  # by uid: a name made anew is another pod
        by_name[pod.name].append(pod)
    counts: dict[Any, int] = defaultdict(int)
    for f in faults:
        if f.kind != "k8s_node_drain" or f.outcome != "injected":
            continue
        for name in f.evicted:
            for pod in by_name.get(name, ()):
                if pod.key and pod.node in (None, f.target):  # a pod evicted before it was seen placed
                    counts[pod.key] += 1
    return counts


def timeline_around(faults: list[Fault], key_text: str, seconds: float = 60) -> list[str]:
    hits = [f for f in faults if f.key and str(f.key[2]) in key_text and str(f.key[0]) in key_text]
    if not hits:
        return [f.line() for f in faults[-15:]]
    around = {id(f) for h in hits for f in faults if abs(f.at - h.at) <= seconds}
    return [f.line() for f in faults if id(f) in around]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=None, help="default: a random seed, printed")
    parser.add_argument("--replay", type=int, default=None, metavar="SEED", help="replay the faults of SEED")
    parser.add_argument("--faults", type=int, default=1000)
    parser.add_argument("--each", type=int, default=0, help="instead: every fault kind this many times")
    parser.add_argument("--minutes", type=float, default=20.0, help=f"the fault window (at most {MAX_MINUTES:g})")
    parser.add_argument("--drain-minutes", type=float, default=8.0, help="the bound on the last runs after it")
    parser.add_argument("--shards", type=int, default=50)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument(
        "--epoch-seconds", type=float, default=EPOCH_SECONDS,
        help=f"each of the Batch training's {EPOCHS} epochs (longer: more of each run for a reclaim to meet)",
    )  # fmt: skip
    parser.add_argument(
        "--accelerate-runs", type=int, default=0,
        help="runs of each two-machine training DAG until this many succeeded, three times as many at most "
             "(default: no limit); each of their Jobs costs some 10 CPU-seconds of torch processes, which the "
             "slice in make test has to spare",
    )  # fmt: skip
    parser.add_argument(
        "--dags", default=",".join(DAGS), help="the soak DAGs to run, comma-separated (default: all of them)"
    )
    parser.add_argument("--grace", type=float, default=30.0, help="seconds before leftovers count as orphans")
    parser.add_argument("--workdir", default=".soak")
    args = parser.parse_args(argv)
    dags = tuple(d for d in args.dags.split(",") if d)
    if unknown := sorted(set(dags) - set(DAGS)):
        parser.error(f"--dags: no soak DAG {', '.join(unknown)} (the soak's: {', '.join(DAGS)})")
    seed = args.replay if args.replay is not None else args.seed
    if seed is None:
        seed = random.SystemRandom().randrange(1, 2**31)
    minutes = min(args.minutes, MAX_MINUTES)
    replay = (
        f"python -m airflow_gpu.testing.soak --replay {seed} --faults {args.faults} --each {args.each} "
        f"--minutes {minutes:g} --drain-minutes {args.drain_minutes:g} --shards {args.shards} --rows {args.rows}"
        f" --epoch-seconds {args.epoch_seconds:g}"
        + (f" --accelerate-runs {args.accelerate_runs}" if args.accelerate_runs else "")
        + (f" --dags {','.join(dags)}" if dags != DAGS else "")
    )
    count = args.each * len(KINDS) if args.each else args.faults
    log(f"soak seed {seed}: {count} faults over {minutes:g} min (replay: {replay})")
    workdir = Path(args.workdir).resolve()
    started = time.time()
    with soak_stack(workdir, log) as soak:
        observer = Observer(soak.kubernetes, soak.batch).start()
        stack = soak.stack
        for dag_id in dags:
            stack.wait_for_dag(dag_id, timeout=300)
        log(f"Airflow up in {time.time() - started:.0f} s at {stack.url}")
        context = Context(stack, soak.kubernetes, soak.batch, soak.redis, soak.postgres, observer)
        supervisor = Supervisor(stack, context.supervisor_lock, context.held_down, log)
        supervisor.start()
        runs = Runs(soak, args.shards, args.rows, args.epoch_seconds, args.accelerate_runs, dags)
        injector = Injector(seed, args.faults, minutes * 60, context, log, each=args.each)
        runs.marked = lambda dag_id, run_id: marked_success(injector.faults, dag_id, run_id)
        window_start = time.time()
        injector.window_start = time.monotonic()  # the first runs' triggers take a while on a loaded machine
        # the drain's end at the latest (the slice's overtime moves it on); no run may be started that cannot end by it
        deadline = window_start + minutes * 60 + args.drain_minutes * 60
        runs.tick(open_window=True, deadline=deadline)
        injector.start()
        while time.time() - window_start < minutes * 60:
            time.sleep(2)
            runs.tick(open_window=True, deadline=deadline)
        overtime = time.time() + OVERTIME_SECONDS  # the slice: a kind whose target was scarce aims on a while
        if args.each and (left := injector.unapplied()):
            log(f"window kept open up to {OVERTIME_SECONDS:.0f} s more: not applied yet: {', '.join(sorted(left))}")
        while args.each and injector.unapplied() and time.time() < overtime:
            time.sleep(2)
            runs.tick(open_window=True, deadline=time.time() + args.drain_minutes * 60)
        injector.join_all()
        soak.disarm()
        soak.kubernetes.clear_slow_pulls()
        log(f"fault window over: {len(injector.faults)} faults; waiting for {len(runs.active)} run(s)")
        deadline = time.time() + args.drain_minutes * 60
        while runs.active and time.time() < deadline:
            time.sleep(2)
            runs.tick(open_window=False, deadline=deadline)
        time.sleep(args.grace)
        observer.close()
        supervisor.stop.set()
        faults = injector.faults
        for fault in faults:  # a node loss whose job had not ended when the fault stopped waiting: read its end now
            if fault.kind == "batch_node_loss" and fault.outcome == "injected" and fault.pod_outcome != "FAILED":
                fault.pod_outcome = str(soak.batch._job(fault.target.split("#")[0]).status)
            if invariants.interrupting(fault):
                backend = "batch" if fault.kind.startswith("batch_") else "kubernetes"
                fault.recovered_at = observer.recovery(backend, fault.key, fault.at, fault.target)
        airflow = collect(soak, runs.runs, faults, args.rows)
        live_pods, live_jobs, live_objects = observer.live_pods(), observer.live_jobs(), observer.live_objects()
        reap_found, reap_output = reap(soak)
        orphan = force_orphan(observer, soak)
        _, forced_output = reap(soak, delete=True) if orphan else (0, "")
        forced_ok = orphan is not None and orphan in forced_output
        bound = args.drain_minutes * 60 + minutes * 60
        orphans, stranded = invariants.no_orphans(
            [*live_pods, *live_jobs, *live_objects], reap_output, reap_found, faults,
            last_trigger_lines(soak.stack.home / "logs"),
        )  # fmt: skip
        final, tally = invariants.final_states(
            airflow["instances"], faults, RETRIES, airflow["stuck"], TASK_QUEUED_TIMEOUT
        )
        verdicts = [
            invariants.one_live_per_try(observer.workloads()),
            orphans,
            invariants.no_start_after_success(observer.workloads(), faults),
            final,
            invariants.results(airflow["expected"], airflow["actual"]),
            invariants.training_results(
                airflow["trainings"], soak_dags.training_result_problem, airflow["training_tries"]
            ),
            invariants.training_jobs(observer.training_objects()),
            invariants.interruptions(
                airflow["recorded"],
                faults,
                drain_evictions(observer, faults),
                invariants.finished_trainings(observer.workloads()),
            ),
            invariants.reclaims_by_phase(observer.workloads(), faults, airflow["instances"], airflow["actual"]),
            invariants.runs_within(runs.runs, bound),
        ]
        missed = [] if forced_ok else [f"not found: {forced_output[-1500:]}"]
        verdicts.append(invariants.Verdict("reap finds a forced orphan", 1, missed))
        run_states: dict[str, int] = defaultdict(int)
        for run in runs.runs:
            run_states[run.get("state", "?")] += 1
        figures = {
            "wall_seconds": time.time() - started,
            "runs": len(runs.runs),
            "run_states": dict(run_states),
            "task_states": tally,
            "pods": len(observer.pods),
            "jobs": len(observer.jobs),
            "training_jobs": sum(1 for o in observer.training_objects() if o.backend == "job"),
            "k8s_requests": soak.kubernetes.api_requests(),
            "batch_requests": soak.batch_requests.total + soak.batch_faulted,
            "supervisor_restarts": len(supervisor.restarts),
            "forced_orphan_found": forced_ok,
            "held_released_by_reap": invariants.held_by_reap(reap_output),
            "stranded_by_a_mark": stranded,
            "bound_seconds": bound,
        }
        report = summary(seed, replay, faults, verdicts, figures)
        (workdir / "report.json").write_text(json.dumps(report, indent=2, default=str))
        (workdir / "report.html").write_text(page(report, faults, verdicts, window_start))
        (workdir / "faults.txt").write_text("\n".join(f.line() for f in faults) + "\n")
        print(text(report, verdicts), flush=True)
        bad = [v for v in verdicts if not v.ok]
        for verdict in bad:
            print(f"\nVIOLATION (seed {seed}): {verdict.name}", flush=True)
            for line in verdict.violations[:5]:
                print(f"  {line}")
                for around in timeline_around(faults, line):
                    print(f"    {around}")
            print(f"  replay: {replay}")
        log(f"report: {workdir / 'report.html'}")
        return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
