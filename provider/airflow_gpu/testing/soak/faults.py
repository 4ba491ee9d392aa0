"""The soak's seeded fault injector: which fault, when, and with what parameters.

``Injector(seed, total, seconds)`` draws ``total`` faults from ``KINDS`` (by weight) with
``random.Random(seed)``, one every ``seconds / (total + 1)``, each applied in a thread of its own so that
a slow fault (a reclaim waits out its pod's grace period) does not hold the schedule up. The kind
sequence and every parameter come from the seed (``--replay SEED`` draws the same ones); which pod
or job a fault hits is drawn from what is live at that moment, so a replay hits the same kinds in
the same order, not always the same objects. A fault with no target at its moment (no running
pod to reclaim) is recorded as ``skipped``.

A spot reclaim meets a pod at every phase of its life, each a kind of its own: ``pending``
(scheduled, not started), ``pulling`` (its image being pulled: the fault makes the next pod's pull
take 6-10 s, ``KubernetesEmulator.slow_pulls``, and reclaims it meanwhile), ``running``,
``after_result`` (the workload printed its ``::airflow-gpu-result::`` line and has not exited yet:
the shards linger a second after it, as a workload that uploads or tears down does) and
``after_success`` (the pod ended ``Succeeded`` and its task, still reading it, has not deleted it:
its node is gone, and PodGC deletes the pod, ``KubernetesEmulator.delete_by_pod_gc``). A reclaim
records what the pod had ended as once it played out (``Fault.pod_outcome``): a reclaim whose pod exited
0 first (an ``after_result`` one often, a ``running`` one now and then) is a reclaim after success. What each allows is
``invariants.reclaims_by_phase``.

Kinds listed in ``NOT_IMPLEMENTED`` are reported with a count of 0 and the reason.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu.testing.kubernetes.objects import ApiError
from airflow_gpu.testing.soak.observer import Observer, TryKey, Workload, job_key

#: What a workload prints to return its result (``utils.results.RESULT_MARKER``).
RESULT_MARKER = "::airflow-gpu-result::"


@dataclass
class Fault:
    """One injected fault: when, what, on what, and when what it broke was whole again."""

    number: int
    at: float
    kind: str
    target: str = ""
    detail: str = ""
    outcome: str = "injected"  # injected, skipped (no target), error: <why>
    key: TryKey | None = None  # the task try it hit, where it hit one
    instance: tuple[str, str, str, int] | None = None  # the task instance a REST fault acted on
    recovered_at: float | None = None
    pod_outcome: str | None = None  # a reclaimed pod: what it had ended as once the reclaim played out
    group: str | None = None  # a reclaimed pod of a training: its Job (one interruption per Job)
    evicted: tuple[str, ...] = ()  # a drain: the pods it evicted, by name (its moment is later than ``at``)

    def line(self) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(self.at)) + f".{int(self.at * 1000) % 1000:03d}"
        return f"#{self.number:<4} {stamp} {self.kind:<16} {self.outcome:<9} {self.target} {self.detail}".rstrip()


@dataclass
class Context:
    """What faults act on (``stack.SoakStack`` gives these)."""

    stack: Any  # AirflowStack
    kubernetes: Any  # KubernetesEmulator
    batch: Any  # BatchEmulator
    redis: Any  # RedisServer
    postgres: Any  # PostgresServer
    observer: Observer
    supervisor_lock: threading.Lock = field(default_factory=threading.Lock)
    held_down: set[str] = field(default_factory=set)  # parts a fault keeps down: the supervisor waits


#: kind -> relative weight. Cheap, frequent faults (API bursts) weigh more than process kills.
KINDS: dict[str, float] = {
    "k8s_reclaim_running": 12,
    "k8s_reclaim_pending": 4,
    "k8s_reclaim_pulling": 3,
    "k8s_reclaim_after_result": 4,
    "k8s_reclaim_after_success": 4,
    "k8s_node_drain": 3,
    "k8s_node_cordon": 3,
    "capacity_loss": 3,
    "k8s_api_429": 10,
    "k8s_api_5xx": 8,
    "k8s_watch_drop": 8,
    "batch_reclaim": 8,
    "batch_node_loss": 2,
    "batch_throttle": 10,
    "batch_5xx": 5,
    "kill_worker": 1.5,
    "kill_triggerer": 1.5,
    "kill_scheduler": 1,
    "mark_failed": 1,
    "mark_success": 1,
    "clear_running": 1,
    "pg_terminate_backend": 2,
    "redis_restart": 1,
}
NOT_IMPLEMENTED: dict[str, str] = {}
#: How long a pulling reclaim's slow pull lasts, and how long an aim at a phase waits for a pod in it.
PULL_SECONDS = (6.0, 10.0)
AIM_SECONDS = 10.0
#: With ``each``: how long a fault that found no target waits before it aims again.
RETRY_SECONDS = 2.0
SPOT_NODE_PREFIX = "gpu-spot"
#: How long a Batch reclaim waits for a training job RUNNING on the spot queue.
BATCH_RECLAIM_WAIT = 30.0
#: How long a node loss waits for its multi-node job to end once the node is gone (the main node's next collective).
NODE_LOSS_END_WAIT = 60.0


class Injector(threading.Thread):
    def __init__(
        self, seed: int, total: int, seconds: float, context: Context, log: Callable[[str], Any], each: int = 0
    ) -> None:
        """``each`` > 0: instead of ``total`` draws by weight, every kind ``each`` times in a seeded
        order (the slice's way to meet every kind in a few minutes)."""
        super().__init__(name="soak-injector", daemon=True)
        self.seed, self.context, self.log = seed, context, log
        self.rng = random.Random(seed)
        self.plan: list[str] | None = None
        if each > 0:
            self.plan = [kind for kind in KINDS for _ in range(each)]
            self.rng.shuffle(self.plan)
            total = len(self.plan)
        self.total, self.seconds = total, seconds
        self.faults: list[Fault] = []
        self.stop = threading.Event()
        self.clock: Callable[[], float] = time.monotonic  # what the schedule's moments are read from
        self.window_start: float | None = None  # the window's start on that clock (the runner's), else the run's
        self.workers: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.applied: set[str] = set()  # the kinds of the faults done and injected

    def draws(self) -> Iterator[tuple[int, str, random.Random]]:
        """The seeded schedule: each fault's number, kind and the generator of its parameters (what
        ``--replay`` draws again); drawn lazily, as ``run`` applies them."""
        kinds, weights = list(KINDS), list(KINDS.values())
        for number in range(1, self.total + 1):
            kind = self.plan[number - 1] if self.plan else self.rng.choices(kinds, weights)[0]
            yield number, kind, random.Random(self.rng.getrandbits(64))

    def run(self) -> None:
        # One interval before each fault and one left after the last: every fault falls inside the window (the
        # slice lost its last one, due as the window closed, when the interval was seconds / total). Each is due
        # at its own moment from the start, not an interval after the last one began: on a loaded machine the
        # waits' lateness added up, and the slice run beside the suite lost its last fault again.
        interval = self.seconds / (self.total + 1)
        start = self.window_start if self.window_start is not None else self.clock()
        for number, kind, params in self.draws():
            if self.stop.wait(max(0.0, start + number * interval - self.clock())):
                return
            fault = Fault(number, time.time(), kind)
            with self.lock:
                self.faults.append(fault)
            worker = threading.Thread(target=self._apply, args=(fault, params), daemon=True)
            worker.start()
            self.workers.append(worker)

    def unapplied(self) -> set[str]:
        """With ``each``: the kinds no fault has been applied of yet (each aims again while the window lasts). From
        the faults done aiming: one aiming again reads "injected" until its aim finds no target."""
        with self.lock:
            return set(self.plan or ()) - self.applied

    def join_all(self, timeout: float = 60) -> None:
        self.stop.set()
        self.join(timeout)
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            worker.join(max(deadline - time.monotonic(), 0.1))

    def _apply(self, fault: Fault, rng: random.Random) -> None:
        while True:
            try:
                getattr(self, f"_{fault.kind}")(fault, rng)
            except Exception as error:  # a fault that could not be applied is recorded, never fatal
                fault.outcome = f"error: {type(error).__name__}: {str(error)[:160]}"
            if not self._aim_again(fault):
                break
        if fault.outcome == "injected":
            with self.lock:
                self.applied.add(fault.kind)
        self.log(fault.line())

    def _aim_again(self, fault: Fault) -> bool:
        """With ``each`` (the slice), a fault that found no target aims again a little later while the window
        lasts, until its kind has been applied once: a kind that found nothing proves nothing (the slice's
        Pending-pod and Batch reclaims found no target either time they were drawn). The full soak's draws
        stay as drawn, so that a replay meets the same sequence."""
        if self.plan is None or fault.outcome != "skipped" or self.stop.wait(RETRY_SECONDS):
            return False
        with self.lock:
            if fault.kind in self.applied:
                return False
        fault.outcome, fault.target, fault.detail, fault.key, fault.group = "injected", "", "", None, None
        fault.instance, fault.evicted, fault.at = None, (), time.time()  # its moment is the new aim's
        return True

    # --- Kubernetes ----------------------------------------------------------------------

    def _wait_for(self, find: Callable[[], list[Any]], seconds: float = 5.0, every: float = 0.2) -> list[Any]:
        """What ``find`` lists, waiting up to ``seconds`` for something: a fault aims at live work."""
        deadline = time.monotonic() + seconds
        while True:
            found = find()
            if found or time.monotonic() >= deadline or self.stop.is_set():
                return found
            time.sleep(every)

    def _pods(self, phase: str, scheduled: bool = True) -> list[Any]:
        def find() -> list[Any]:
            live = self.context.observer.live_pods()
            chosen = (p for p in live if p.statuses and p.statuses[-1][1] == phase and (p.node or not scheduled))
            return sorted(chosen, key=lambda p: p.name)

        return self._wait_for(find)

    def _reclaim(self, fault: Fault, rng: random.Random, phase: str) -> None:
        pods = self._pods(phase)
        if not pods:
            fault.outcome = "skipped"
            return
        self._preempt(fault, rng.choice(pods))

    def _preempt(self, fault: Fault, pod: Workload) -> None:
        """Reclaim ``pod``'s node (2 s grace) and record what the pod had ended as once it played out."""
        fault.target, fault.key, fault.group, fault.detail = pod.name, pod.key, pod.group, f"node {pod.node}"
        self.context.kubernetes.preempt(pod.name, grace_period_seconds=2)
        fault.pod_outcome = self._outcome(pod.name)
        fault.detail += f", pod {fault.pod_outcome}"

    def _outcome(self, name: str) -> str | None:
        with self.context.observer.lock:
            found = [p for p in self.context.observer.pods.values() if p.name == name]
        return found[-1].outcome if found else None

    def _k8s_reclaim_running(self, fault: Fault, rng: random.Random) -> None:
        self._reclaim(fault, rng, "Running")

    def _k8s_reclaim_pending(self, fault: Fault, rng: random.Random) -> None:
        self._reclaim(fault, rng, "Pending")

    def _by_name(self, names: list[str]) -> list[Workload]:
        live = {p.name: p for p in self.context.observer.live_pods()}
        return sorted((live[n] for n in names if n in live), key=lambda p: p.name)

    def _k8s_reclaim_pulling(self, fault: Fault, rng: random.Random) -> None:
        """The next pod to start has a slow image pull; its node is reclaimed while it pulls."""
        kubernetes = self.context.kubernetes
        kubernetes.slow_pulls(rng.uniform(*PULL_SECONDS), times=1, namespace="default")
        pods = self._wait_for(lambda: self._by_name(kubernetes.pulling()), AIM_SECONDS, every=0.1)
        if not pods:
            kubernetes.clear_slow_pulls()  # no pod started meanwhile: no later pod pulls slowly for it
            fault.outcome = "skipped"
            return
        self._preempt(fault, rng.choice(pods))

    def _k8s_reclaim_after_result(self, fault: Fault, rng: random.Random) -> None:
        """A pod that printed its result line and still runs (it has not exited) is reclaimed."""
        kubernetes = self.context.kubernetes

        def find() -> list[Workload]:
            running = self._by_name(kubernetes.printed(RESULT_MARKER))
            return [p for p in running if p.statuses and p.statuses[-1][1] == "Running"]

        pods = self._wait_for(find, AIM_SECONDS, every=0.1)
        if not pods:
            fault.outcome = "skipped"
            return
        self._preempt(fault, rng.choice(pods))

    def _k8s_reclaim_after_success(self, fault: Fault, rng: random.Random) -> None:
        """A pod that ended ``Succeeded`` and that its task still reads (not deleted yet) loses its node:
        PodGC deletes it, and its log with it."""
        pods = self._wait_for(lambda: self.context.observer.unread_successes(within=5.0), AIM_SECONDS, every=0.1)
        if not pods:
            fault.outcome = "skipped"
            return
        pod = rng.choice(sorted(pods, key=lambda p: p.name))
        fault.target, fault.key, fault.group, fault.detail = pod.name, pod.key, pod.group, f"node {pod.node}"
        try:
            self.context.kubernetes.delete_by_pod_gc(pod.name)
        except ApiError as error:  # the task deleted it first: no longer a pod being read
            if error.code != 404:
                raise
            fault.outcome, fault.detail = "skipped", "deleted by its task first"
            return
        fault.pod_outcome = "Succeeded"
        fault.detail += ", Succeeded pod deleted by PodGC"

    def _spot_nodes(self) -> list[str]:
        nodes = self.context.kubernetes.state.store.list("nodes")
        return sorted(n["metadata"]["name"] for n in nodes if "spot" in n["metadata"]["name"])

    def _k8s_node_drain(self, fault: Fault, rng: random.Random) -> None:
        busy = sorted(self._wait_for(lambda: sorted({p.node for p in self.context.observer.live_pods() if p.node})))
        if not busy:
            fault.outcome = "skipped"
            return
        node = rng.choice(busy)
        fault.target = node
        evicted = self.context.kubernetes.drain(node)
        fault.detail, fault.evicted = f"evicted {len(evicted)}", tuple(evicted)
        time.sleep(rng.uniform(5, 10))
        self.context.kubernetes.cordon(node, False)
        fault.recovered_at = time.time()

    def _k8s_node_cordon(self, fault: Fault, rng: random.Random) -> None:
        nodes = self._spot_nodes()
        node = rng.choice(nodes)
        fault.target = node
        self.context.kubernetes.cordon(node)
        time.sleep(rng.uniform(5, 15))
        self.context.kubernetes.cordon(node, False)
        fault.recovered_at = time.time()

    def _capacity_loss(self, fault: Fault, rng: random.Random) -> None:
        seconds = rng.uniform(8, 20)
        if rng.random() < 0.5:
            nodes = self._spot_nodes()
            fault.target, fault.detail = "kubernetes spot pool", f"{len(nodes)} nodes cordoned {seconds:.0f}s"
            for node in nodes:
                self.context.kubernetes.cordon(node)
            time.sleep(seconds)
            for node in nodes:
                self.context.kubernetes.cordon(node, False)
        else:
            fault.target, fault.detail = "batch gpu-spot-ce", f"stalled {seconds:.0f}s"
            self.context.batch.stall("gpu-spot-ce")
            time.sleep(seconds)
            self.context.batch.release("gpu-spot-ce")
        fault.recovered_at = time.time()

    def _k8s_api(self, fault: Fault, rng: random.Random, status: int) -> None:
        resource = rng.choice(["pods", "pods/log", "events", None])
        times = rng.randint(2, 6)
        rule: dict[str, Any] = {"status": status, "times": times, "resource": resource}
        if status == 429:
            rule["retry_after"] = 1
        self.context.kubernetes.inject_api_fault(**rule)
        fault.target, fault.detail = resource or "any", f"{status} x{times}"

    def _k8s_api_429(self, fault: Fault, rng: random.Random) -> None:
        self._k8s_api(fault, rng, 429)

    def _k8s_api_5xx(self, fault: Fault, rng: random.Random) -> None:
        self._k8s_api(fault, rng, rng.choice([500, 503]))

    def _k8s_watch_drop(self, fault: Fault, rng: random.Random) -> None:
        fault.target = "every watch"
        self.context.kubernetes.end_watches()

    # --- AWS Batch -----------------------------------------------------------------------

    def _batch_reclaim(self, fault: Fault, rng: random.Random) -> None:
        # The Batch trainings and the Batch fan-outs' shards run on Batch spot (the two-machine trainings run on
        # the on-demand queue: AWS runs no multi-node job on Spot), each RUNNING for a part of its run: a reclaim
        # waits up to BATCH_RECLAIM_WAIT for one (at 5 s, the slice's found none in two runs beside the suite).
        aimed = self._running_batch_job(fault, rng, lambda j: j.status == "RUNNING" and j.job_queue.name == "gpu-spot")
        if aimed is not None:
            fault.target = aimed.job_id
            self.context.batch.reclaim(aimed.job_id)

    def _running_batch_job(self, fault: Fault, rng: random.Random, wanted: Callable[[Any], bool]) -> Any:
        """A job ``wanted`` that no reclaim or TerminateJob is stopping yet, waited for up to ``BATCH_RECLAIM_WAIT``
        and drawn with ``rng``, its try in ``fault.key``; None (the fault skipped) when none came."""
        running = self._wait_for(
            lambda: sorted((j for j in self.context.batch.jobs() if wanted(j) and _not_stopping(j)),
                           key=lambda j: j.job_id),
            seconds=BATCH_RECLAIM_WAIT,
        )  # fmt: skip
        if not running:
            fault.outcome = "skipped"
            return None
        job = rng.choice(running)
        seen = self.context.observer.jobs.get(job.job_id)
        # the observer polls: a job just started may not be in its history yet (the sixth soak counted a
        # training's first reclaim for no try); its tags name the try all the same
        fault.key = seen.key if seen else job_key(self.context.batch.driver.backend.list_tags_for_resource(job.arn))
        return job

    def _batch_armed(self, fault: Fault, operation: str) -> bool:
        """Whether an earlier fault still waits for calls of ``operation``: Batch faults hit "the next N
        calls", and a SubmitJob comes about once a minute, so they would pile up past the window (the
        first 1,000-fault soak queued some 400 faulted calls and submitted one job in 25 minutes)."""
        faults = self.context.batch._throttle
        with faults._lock:
            waiting = [a for a in faults._armed.get(faults.key(operation), []) if a.hits < a.times]
        if waiting:
            fault.target, fault.outcome, fault.detail = operation, "skipped", "an earlier fault still armed"
        return bool(waiting)

    def _batch_throttle(self, fault: Fault, rng: random.Random) -> None:
        operation = rng.choice(["DescribeJobs", "DescribeJobs", "SubmitJob", "ListJobs", "TerminateJob"])
        times = rng.randint(2, 5)
        if self._batch_armed(fault, operation):
            return
        self.context.batch.throttle(operation, times)
        fault.target, fault.detail = operation, f"x{times}"

    def _batch_5xx(self, fault: Fault, rng: random.Random) -> None:
        operation = rng.choice(["DescribeJobs", "SubmitJob", "DescribeJobDefinitions"])
        kind = rng.choice(["server", "unavailable", "reset"])
        times = rng.randint(1, 3)
        if self._batch_armed(fault, operation):
            return
        self.context.batch.fail(operation, kind, times=times)
        fault.target, fault.detail = operation, kind

    # --- Airflow's processes and databases ------------------------------------------------

    def _kill(self, fault: Fault, rng: random.Random, prefix: str) -> None:
        stack = self.context.stack
        names = sorted(n for n in stack.parts if n.startswith(prefix))
        name = rng.choice(names)
        down = rng.uniform(1, 5)
        fault.target, fault.detail = name, f"down {down:.1f}s"
        with self.context.supervisor_lock:
            if name in self.context.held_down:
                fault.outcome = "skipped"  # another fault holds it down already
                return
            self.context.held_down.add(name)
            stack.kill_part(name)
        time.sleep(down)
        with self.context.supervisor_lock:
            stack.restart_part(name)
            self.context.held_down.discard(name)
        fault.recovered_at = time.time()

    def _kill_worker(self, fault: Fault, rng: random.Random) -> None:
        self._kill(fault, rng, "worker")

    def _kill_triggerer(self, fault: Fault, rng: random.Random) -> None:
        self._kill(fault, rng, "triggerer")

    def _kill_scheduler(self, fault: Fault, rng: random.Random) -> None:
        self._kill(fault, rng, "scheduler")

    def _pg_terminate_backend(self, fault: Fault, rng: random.Random) -> None:
        import psycopg2  # type: ignore[import-untyped]  # Airflow's driver; no stubs installed

        server = self.context.postgres
        with contextlib.closing(
            psycopg2.connect(host="127.0.0.1", port=server.port, user=server.user, dbname=server.database)
        ) as connection:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = %s ORDER BY pid",
                    (server.database,),
                )
                pids = [row[0] for row in cursor.fetchall()]
                chosen = rng.sample(pids, k=min(len(pids), rng.randint(1, 4)))
                for pid in chosen:
                    cursor.execute("SELECT pg_terminate_backend(%s)", (pid,))
        fault.target, fault.detail = "airflow's connections", f"{len(chosen)} of {len(pids)} terminated"

    def _redis_restart(self, fault: Fault, rng: random.Random) -> None:
        down = rng.uniform(0.5, 3)
        fault.target, fault.detail = "redis-server", f"down {down:.1f}s, queue lost"
        self.context.redis.restart(down)
        fault.recovered_at = time.time()

    # --- a person, through the REST API --------------------------------------------------

    def _live_task(self, rng: random.Random, states: tuple[str, ...]) -> dict[str, Any] | None:
        query = "&".join(f"state={s}" for s in states)

        def find() -> list[dict[str, Any]]:
            path = f"/api/v2/dags/~/dagRuns/~/taskInstances?{query}&limit=200"
            answer = self.context.stack.request("GET", path)
            return sorted(
                (t for t in answer["task_instances"] if t["task_id"] in ("score_shard", "train")),
                key=lambda t: (t["dag_id"], t["dag_run_id"], t["task_id"], t["map_index"]),
            )

        candidates = self._wait_for(find, every=1.0)  # a REST read each time: not five a second
        return rng.choice(candidates) if candidates else None

    def _mark(self, fault: Fault, rng: random.Random, new_state: str) -> None:
        task = self._live_task(rng, ("running", "deferred"))
        if task is None:
            fault.outcome = "skipped"
            return
        self._aim(fault, task)
        path = f"/api/v2/dags/{task['dag_id']}/dagRuns/{task['dag_run_id']}/taskInstances/{task['task_id']}"
        if task["map_index"] >= 0:
            path += f"/{task['map_index']}"
        try:
            self.context.stack.request("PATCH", path, {"new_state": new_state})
        except urllib.error.HTTPError as error:
            fault.outcome = f"error: HTTP {error.code}"

    def _aim(self, fault: Fault, task: dict[str, Any]) -> None:
        fault.instance = (task["dag_id"], task["task_id"], task["dag_run_id"], task["map_index"])
        fault.key = (*fault.instance, task["try_number"])
        fault.target = f"{task['dag_id']}.{task['task_id']}[{task['map_index']}] try {task['try_number']}"
        fault.detail = f"was {task['state']}"

    def _mark_failed(self, fault: Fault, rng: random.Random) -> None:
        self._mark(fault, rng, "failed")

    def _mark_success(self, fault: Fault, rng: random.Random) -> None:
        self._mark(fault, rng, "success")

    def _batch_node_loss(self, fault: Fault, rng: random.Random) -> None:
        """The host of a two-machine Batch training's child node fails: multi-node parallel jobs run on no Spot,
        but an on-demand instance can still go, and Batch fails that node alone. Records what the job ended as
        (``pod_outcome``): the provider stops a job whose child node failed (``hooks.batch_nodes``), so FAILED,
        unless its main node had finished first."""
        job = self._running_batch_job(fault, rng, lambda j: _running_child(j) is not None)
        if job is None:
            return
        node = _running_child(job)
        if node is None:  # its node ended between the look and now
            fault.outcome = "skipped"
            return
        fault.target, fault.detail = node.job_id, "on-demand host failed"
        self.context.batch.reclaim(node.job_id)
        ended = self._wait_for(
            lambda: [job.status] if job.status in ("SUCCEEDED", "FAILED") else [], NODE_LOSS_END_WAIT
        )
        fault.pod_outcome = ended[0] if ended else None
        fault.detail += f", job {fault.pod_outcome or job.status}"

    def _clear_running(self, fault: Fault, rng: random.Random) -> None:
        task = self._live_task(rng, ("running",))
        if task is None:
            fault.outcome = "skipped"
            return
        self._aim(fault, task)
        body = {
            "dry_run": False, "dag_run_id": task["dag_run_id"], "task_ids": [[task["task_id"], task["map_index"]]],
            "only_failed": False, "only_running": False, "reset_dag_runs": True,
        }  # fmt: skip
        self.context.stack.request("POST", f"/api/v2/dags/{task['dag_id']}/clearTaskInstances", body)


def _running_child(job: Any) -> Any:
    """A multi-node job's child node that is RUNNING (the first by index), or None: not such a job, or none runs."""
    nodes = getattr(job, "nodes", None)
    if job.status != "RUNNING" or not nodes:
        return None
    # not one a fault is stopping already: a second loss of the same host is the same interruption
    return next(
        (n for _, n in sorted(nodes.items()) if not n.is_main and n.status == "RUNNING" and n.reclaim is None), None
    )


def _not_stopping(job: Any) -> bool:
    """A running Batch job no reclaim or TerminateJob is stopping yet (a multi-node job: its main node, which a
    reclaim takes): a second reclaim of an attempt already going is the same interruption, not another (the
    seventh soak counted two for one attempt of a Batch training)."""
    node = getattr(job, "main", None) or job
    return node.reclaim is None and node.termination is None and job.termination is None
