"""The soak runner's run conf: what each DAG's run is given (``runner.Runs.conf``). No stack: ``Runs``
reads only the soak's workdir from it, given here as a plain object."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from airflow_gpu.testing.soak.runner import DAGS, Runs, run_port
from airflow_gpu.testing.soak.soak_dags import ACCELERATE, EPOCH_SECONDS, FANOUT, PORTS_PER_DAG, TRAINING


def runs(tmp_path: Path, **kwargs: Any) -> Runs:
    return Runs(SimpleNamespace(workdir=tmp_path), shards=6, rows=100, **kwargs)  # type: ignore[arg-type]


def test_each_training_run_rendezvous_on_a_port_no_recent_run_of_either_dag_holds(tmp_path: Path) -> None:
    """Every emulated machine is this host: a run marked done while deferred keeps its Job until the
    trigger's cleanup, and the next run, started at once, must not meet its main machine's port."""
    soak = runs(tmp_path)
    ports: dict[str, list[int]] = {dag_id: [] for dag_id in ACCELERATE}
    for _ in range(PORTS_PER_DAG):
        for dag_id in ACCELERATE:
            ports[dag_id].append(soak.conf(dag_id)["port"])
            soak.runs.append({"dag_id": dag_id})
    every = [port for taken in ports.values() for port in taken]
    assert len(set(every)) == len(every) == PORTS_PER_DAG * len(ACCELERATE)
    assert all(29500 + 70 < port <= 65535 for port in every)  # clear of the e2e scenarios' 29500-29570
    dag_id = next(iter(ACCELERATE))
    assert run_port(dag_id, PORTS_PER_DAG) == ports[dag_id][0]  # the range cycles


def test_batch_trainings_get_the_epoch_length_and_fan_outs_their_size(tmp_path: Path) -> None:
    assert runs(tmp_path).conf(TRAINING[0])["epoch_seconds"] == EPOCH_SECONDS
    conf = runs(tmp_path, epoch_seconds=2.0).conf(TRAINING[1])
    assert conf == {"workdir": str(tmp_path / "checkpoints"), "epoch_seconds": 2.0}
    assert runs(tmp_path).conf(FANOUT[0]) == {"shards": 6, "rows": 100}


def with_a_stack(tmp_path: Path) -> tuple[Runs, dict[str, str], list[str]]:
    """``Runs`` with one run of each two-machine training DAG to succeed, over a plain object standing in for
    the soak's Airflow stack (the runner's boundary: ``run_state`` and ``trigger``); the runs' states, which the
    test sets, and the DAGs triggered, in order."""
    states: dict[str, str] = {}
    triggered: list[str] = []

    def trigger(dag_id: str, conf: dict[str, Any]) -> str:
        triggered.append(dag_id)
        states[f"r{len(triggered)}"] = "running"
        return f"r{len(triggered)}"

    stack = SimpleNamespace(run_state=lambda dag_id, run_id: states[run_id], trigger=trigger)
    soak = Runs(SimpleNamespace(workdir=tmp_path, stack=stack), shards=6, rows=100, accelerate_runs=1)  # type: ignore[arg-type]
    return soak, states, triggered


def test_a_training_dag_short_of_a_success_gets_runs_until_one_succeeds_even_after_the_window(
    tmp_path: Path,
) -> None:
    """A fault that marks the slice's one training run leaves no training result to judge (CI's slower make
    test ended so once); its DAG gets a new run, past the window, until one succeeds or three started. The
    Airflow stack is a plain object (``with_a_stack``)."""
    soak, states, triggered = with_a_stack(tmp_path)
    soak.tick(open_window=True)
    assert sorted(triggered) == sorted(DAGS)
    marked, *done = ACCELERATE
    for run in soak.runs:
        states[run["run_id"]] = "failed" if run["dag_id"] == marked else "success"
    soak.tick(open_window=False)
    assert triggered[len(DAGS) :] == [marked]  # the window is closed: only the training short of a success
    for _ in range(3):
        for run_id in states:
            states[run_id] = "failed" if states[run_id] == "running" else states[run_id]
        soak.tick(open_window=False)
    assert triggered.count(marked) == 3 and all(triggered.count(d) == 1 for d in done)  # three at most
    assert not any(dag_id in ACCELERATE for dag_id in soak.active)
    soak.tick(open_window=True)
    assert triggered.count(marked) == 3 and all(triggered.count(d) == 1 for d in done)  # enough, window open too
    assert all(triggered.count(dag_id) == 2 for dag_id in (*FANOUT, *TRAINING))  # the others: a new run each


def test_a_run_a_fault_marked_success_is_not_a_training_to_judge_and_the_drain_starts_none_it_cannot_finish(
    tmp_path: Path,
) -> None:
    """A Mark Success leaves the run ``success`` with no result: its DAG gets another run. Past the window, a
    new run starts only with time left for it (twice the DAG's longest run, two minutes at least): one still
    going at the judging would be judged an orphan. The stack is a plain object, as above."""
    import time

    soak, states, triggered = with_a_stack(tmp_path)
    soak.tick(open_window=True)
    marked, *done = ACCELERATE
    marked_run = next(run["run_id"] for run in soak.runs if run["dag_id"] == marked)
    soak.marked = lambda dag_id, run_id: run_id == marked_run
    states.update(dict.fromkeys(states, "success"))
    soak.tick(open_window=False, deadline=time.time() + 60)  # too near: nothing new
    assert triggered.count(marked) == 1
    soak.tick(open_window=False, deadline=time.time() + 600)
    assert triggered.count(marked) == 2 and all(triggered.count(d) == 1 for d in done)  # the marked one again
    assert not any(dag_id in soak.active for dag_id in (*FANOUT, *TRAINING))  # the window is closed


def test_in_the_window_a_dag_gets_no_run_that_its_longest_would_not_end_before_the_drain_does(tmp_path: Path) -> None:
    """The twenty-third soak's fan-outs took up to 904 s beside the nine other DAGs: one started in the window's
    last minutes would still run when the history is judged. A DAG whose longest run so far fits in what is left
    of the drain gets its next run; one whose longest does not, none. The stack is a plain object, as above."""
    import time

    soak, states, triggered = with_a_stack(tmp_path)
    soak.tick(open_window=True)
    slow, quick = FANOUT[0], TRAINING[0]
    for run in soak.runs:
        run["started"] = time.time() - (900 if run["dag_id"] == slow else 100)
    states.update(dict.fromkeys(states, "success"))
    soak.tick(open_window=True, deadline=time.time() + 600)
    assert triggered.count(slow) == 1 and triggered.count(quick) == 2
    assert soak.runs[-1]["dag_id"] != slow and slow not in soak.active


def test_only_the_dags_asked_for_are_run(tmp_path: Path) -> None:
    """``--dags``: the slice runs seven of the ten. The stack is a plain object, as above."""
    soak, _, triggered = with_a_stack(tmp_path)
    soak.dags = (FANOUT[0], TRAINING[1])
    soak.tick(open_window=True)
    assert triggered == [FANOUT[0], TRAINING[1]]
