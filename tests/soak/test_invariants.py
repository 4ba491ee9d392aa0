"""The soak's judges (``airflow_gpu.testing.soak.invariants``) on made-up histories: each one must
call a broken promise broken, and leave the legitimate shapes alone (a reclaimed pod followed by
its replacement, a clear followed by a new pod, Batch's half-second reading)."""

from __future__ import annotations

from airflow_gpu.testing.soak import invariants
from airflow_gpu.testing.soak.faults import Fault
from airflow_gpu.testing.soak.observer import Workload

KEY = ("soak_fanout_kubernetes", "score_shard", "manual__1", 3, 1)


def pod(name: str, created: float, ended: float | None, outcome: str | None = "Failed", key=KEY) -> Workload:  # type: ignore[no-untyped-def]
    return Workload("kubernetes", name, key, created, running=created + 0.5, ended=ended, outcome=outcome)


def test_two_live_pods_of_one_try_are_a_violation_and_a_replacement_is_not() -> None:
    replaced = [pod("a", 0, 10), pod("b", 10.2, 20, "Succeeded")]
    assert invariants.one_live_per_try(replaced).ok
    doubled = [pod("a", 0, 10), pod("b", 5, 20, "Succeeded")]
    verdict = invariants.one_live_per_try(doubled)
    assert len(verdict.violations) == 1 and "b created" in verdict.violations[0]
    # another try of the same task instance may overlap: a killed worker's pod is the next try's to clean
    other_try = [pod("a", 0, 10), pod("b", 5, 20, key=(*KEY[:4], 2))]
    assert invariants.one_live_per_try(other_try).ok


def test_a_batch_job_read_half_a_second_late_is_not_an_overlap() -> None:
    def job(name: str, created: float, ended: float | None) -> Workload:
        return Workload("batch", name, KEY, created, ended=ended, outcome="FAILED")

    assert invariants.one_live_per_try([job("j1", 0, 10.4), job("j2", 10.0, None)]).ok
    assert not invariants.one_live_per_try([job("j1", 0, 12.0), job("j2", 10.0, None)]).ok


def test_a_start_after_success_is_a_violation_unless_the_instance_was_cleared_in_between() -> None:
    history = [pod("a", 0, 10, "Succeeded"), pod("b", 15, 25, "Succeeded", key=(*KEY[:4], 2))]
    assert not invariants.no_start_after_success(history, []).ok
    clear = Fault(1, 12.0, "clear_running", instance=KEY[:4])
    assert invariants.no_start_after_success(history, [clear]).ok
    too_early = Fault(1, 5.0, "clear_running", instance=KEY[:4])  # before the success: no excuse
    assert not invariants.no_start_after_success(history, [too_early]).ok


def test_final_states_allow_failed_only_when_marked_or_out_of_retries_to_kills() -> None:
    ti = {"dag_id": KEY[0], "task_id": KEY[1], "dag_run_id": KEY[2], "map_index": KEY[3], "state": "failed",
          "try_number": 1}  # fmt: skip
    verdict, tally = invariants.final_states([ti], [], retries=4)
    assert not verdict.ok and tally == {"failed": 1}
    marked = Fault(1, 1.0, "mark_failed", instance=KEY[:4])
    assert invariants.final_states([ti], [marked], retries=4)[0].ok
    kill = Fault(2, 1.0, "kill_worker")
    assert not invariants.final_states([ti], [kill], retries=4)[0].ok  # retries left: it must have succeeded
    assert invariants.final_states([{**ti, "try_number": 5}], [kill], retries=4)[0].ok


def test_interruptions_must_match_the_reclaims_on_that_try() -> None:
    reclaims = [Fault(1, 1.0, "k8s_reclaim_running", key=KEY), Fault(2, 2.0, "k8s_reclaim_running", key=KEY)]
    assert invariants.interruptions({KEY: 2}, reclaims, {}).ok
    assert not invariants.interruptions({KEY: 1}, reclaims, {}).ok  # one reclaim was not recorded
    assert not invariants.interruptions({KEY: 3}, reclaims, {}).ok  # one recorded that never happened
    assert invariants.interruptions({KEY: 3}, reclaims, {KEY: 1}).ok  # a drain's eviction may count
    skipped = [Fault(1, 1.0, "k8s_reclaim_running", key=KEY, outcome="skipped")]
    assert not invariants.interruptions({KEY: 1}, skipped, {}).ok


def test_results_and_run_bounds() -> None:
    assert invariants.results({KEY[:4]: {"score": 1}}, {KEY[:4]: {"score": 1}}).ok
    assert not invariants.results({KEY[:4]: {"score": 1}}, {KEY[:4]: None}).ok
    runs = [{"dag_id": "d", "run_id": "r", "state": "success", "seconds": 50.0}]
    assert invariants.runs_within(runs, 60).ok
    assert not invariants.runs_within(runs, 40).ok
    assert not invariants.runs_within([{"dag_id": "d", "run_id": "r", "state": "running"}], 60).ok
