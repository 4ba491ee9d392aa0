"""The soak's judges (``airflow_gpu.testing.soak.invariants``) on made-up histories: each one must
call a broken promise broken, and leave the legitimate shapes alone (a reclaimed pod followed by
its replacement, a clear followed by a new pod, Batch's half-second reading)."""

from __future__ import annotations

import json
import time

from airflow_gpu.spot.training_job import INDEX_KEY
from airflow_gpu.testing.soak import invariants
from airflow_gpu.testing.soak.faults import Fault
from airflow_gpu.testing.soak.observer import Observer, Workload
from airflow_gpu.utils.training_job import JOB_LABEL

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


def test_a_success_of_a_try_cleared_while_it_ran_does_not_forbid_the_next_try_s_run() -> None:
    """The fourth soak: a Clear of try 1's running training at 05:28:28; its Job's machines finished 6 s later,
    while Airflow was stopping the try; try 2 trained again, as the Clear asked. A Clear of another try, or
    one after the success, excuses nothing of that kind."""
    history = [pod("a", 0, 10, "Succeeded"), pod("b", 15, 25, "Succeeded", key=(*KEY[:4], 2))]
    cleared_first = Fault(1, 5.0, "clear_running", instance=KEY[:4], key=KEY)
    assert invariants.no_start_after_success(history, [cleared_first]).ok
    cleared_other = Fault(1, 5.0, "clear_running", instance=KEY[:4], key=(*KEY[:4], 7))
    assert not invariants.no_start_after_success(history, [cleared_other]).ok


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


def test_a_task_airflow_failed_stuck_in_queued_is_allowed_only_when_the_broker_was_disturbed_in_each_period() -> None:
    """The thirteenth soak's deferrable Batch training, as Airflow's event log told it (times from
    its first requeue): queued 73 s before it, 5 s after a Redis restart (a worker received it and
    never ran it); requeued at 0 and 75 s, each time lost to a Redis restart 2 s later; failed at
    151 s with its retries unused (apache/airflow#43520). The same events with no broker fault, or
    with one period left unexplained, are a violation: that task waited for a busy worker."""
    ti = {"dag_id": "soak_train_batch_deferrable", "task_id": "train", "dag_run_id": "manual__1", "map_index": -1,
          "state": "failed", "try_number": 1}  # fmt: skip
    instance = ("soak_train_batch_deferrable", "train", "manual__1", -1)
    base = 1_000_000.0
    events = [(base, invariants.STUCK_REQUEUED), (base + 75, invariants.STUCK_REQUEUED),
              (base + 151, invariants.STUCK_FAILED)]  # fmt: skip
    restarts = [Fault(n, base + at, "redis_restart") for n, at in ((1, -78), (2, 5), (3, 77))]
    verdict, tally = invariants.final_states([ti], restarts, 4, {instance: events}, queued_timeout=60)
    assert verdict.ok and tally == {"failed: stuck in queued": 1}

    verdict, _ = invariants.final_states([ti], [], 4, {instance: events}, queued_timeout=60)
    assert len(verdict.violations) == 1 and "stuck in queued" in verdict.violations[0]
    # the first period reaches back only to the latest it can have been queued, less a reconnect's aftermath
    too_early = [Fault(1, base - 121, "redis_restart"), *restarts[1:]]
    assert not invariants.final_states([ti], too_early, 4, {instance: events}, queued_timeout=60)[0].ok
    one_missing = [restarts[0], restarts[2]]  # nothing between the first requeue and the second
    verdict, _ = invariants.final_states([ti], one_missing, 4, {instance: events}, queued_timeout=60)
    assert not verdict.ok and time.strftime("%H:%M:%S", time.localtime(base + 75)) in verdict.violations[0]
    worker_kills = [Fault(n, f.at, "kill_worker") for n, f in enumerate(restarts)]  # a kill holds messages too
    assert invariants.final_states([ti], worker_kills, 4, {instance: events}, queued_timeout=60)[0].ok
    skipped = [Fault(f.number, f.at, f.kind, outcome="skipped") for f in restarts]
    assert not invariants.final_states([ti], skipped, 4, {instance: events}, queued_timeout=60)[0].ok
    # requeued but not failed by Airflow: a failure of its own, judged as before (retries left, no mark)
    requeued_only = {instance: events[:2]}
    assert not invariants.final_states([ti], restarts, 4, requeued_only, queued_timeout=60)[0].ok
    # Airflow counts the requeues from the try's last "running" (a deferred task resumes under the same try):
    # the requeue before it needs no excuse, and the periods start over after it
    resumed = {instance: [(base - 200, invariants.STUCK_REQUEUED), (base - 150, invariants.RUNNING), *events]}
    assert invariants.final_states([ti], restarts, 4, resumed, queued_timeout=60)[0].ok
    # a task besides the GPU ones (the reduce step) is judged the same way
    reduce = {**ti, "task_id": "summarize"}
    reduce_instance = (*instance[:1], "summarize", *instance[2:])
    assert invariants.final_states([reduce], restarts, 4, {reduce_instance: events}, queued_timeout=60)[0].ok
    assert not invariants.final_states([reduce], [], 4, {reduce_instance: events}, queued_timeout=60)[0].ok


def _machine(
    index: str, phase: str, *, deleting: bool = False, end: dict[str, object] | None = None
) -> dict[str, object]:
    """A training machine's pod as the Kubernetes emulator's store hands it to the observer."""
    labels = {"airflow-gpu/accelerator": "h100", JOB_LABEL: "train-c28a1098-r3", INDEX_KEY: index}
    metadata: dict[str, object] = {"uid": f"uid-{index}", "name": f"train-c28a1098-r3-{index}-x", "labels": labels}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-27T15:35:51Z"
    status: dict[str, object] = {"phase": phase}
    if end is not None:
        message = "::airflow-gpu-end::" + json.dumps(end)
        terminated = {"exitCode": 0, "reason": "Completed", "message": message}
        status["containerStatuses"] = [{"name": "base", "state": {"terminated": terminated}}]
    return {"metadata": metadata, "spec": {"nodeName": "gpu-spot-1"}, "status": status}


def test_a_main_machine_its_job_deleted_as_it_exited_with_its_result_finished_the_training() -> None:
    """The fourteenth soak: machine 1 reclaimed after the last epoch; the Job's controller, judging the Job
    failed, deleted the active main machine (``deleteActivePods``), which exited 0 with its result in its grace
    period. The observer saw the deletion first; the training had finished all the same, so that reclaim is
    no interruption. A main machine that exited 0 on the deletion's SIGTERM, or without its result, did not
    finish it."""
    result = {"exit_code": 0, "signals": [], "spot_notice": None, "result": "kept"}

    def finished(end: dict[str, object]) -> frozenset[str]:
        observer = Observer(kubernetes=None, batch=None)
        observer._on_change("pods", "ADDED", _machine("0", "Running"))
        observer._on_change("pods", "MODIFIED", _machine("0", "Running", deleting=True))
        observer._on_change("pods", "MODIFIED", _machine("0", "Succeeded", deleting=True, end=end))
        (main,) = observer.workloads()
        assert main.outcome == "deleted"  # its end as a live pod: the deletion
        return invariants.finished_trainings(observer.workloads())

    assert finished(result) == {"train-c28a1098-r3"}
    assert finished({**result, "signals": ["SIGTERM"]}) == frozenset()
    assert finished({**result, "result": "none"}) == frozenset()
    reclaim = Fault(1, 1.0, "k8s_reclaim_running", key=KEY, target="train-c28a1098-r3-1-x", group="train-c28a1098-r3")
    assert invariants.interruptions({KEY: 0}, [reclaim], {}, finished(result)).ok
    assert not invariants.interruptions({KEY: 0}, [reclaim], {}, finished({**result, "result": "none"})).ok


def test_a_pod_that_finished_with_its_result_after_its_deletion_was_asked_is_a_success_to_start_again_after() -> None:
    """A pod whose deletion was asked while it ran ends ``deleted`` for liveness, but if its workload then exited 0
    with its result (``Workload.finished``), the task instance had its success: a pod made for it afterwards ran
    the workload again. One that exited on the deletion's signal did not finish (``finished`` stays False)."""
    deleted = pod("a", 0, 10, "deleted")
    deleted.statuses.append((12.0, "Succeeded"))
    deleted.finished = True
    again = pod("b", 15, 25, "Succeeded", key=(*KEY[:4], 2))
    verdict = invariants.no_start_after_success([deleted, again], [])
    assert len(verdict.violations) == 1 and "b created 3.0s after a success" in verdict.violations[0]
    stopped = pod("a", 0, 10, "deleted")
    stopped.statuses.append((12.0, "Succeeded"))  # exited 0 on the deletion's SIGTERM: not finished
    assert invariants.no_start_after_success([stopped, again], []).ok


def test_interruptions_must_match_the_reclaims_on_that_try() -> None:
    reclaims = [Fault(1, 1.0, "k8s_reclaim_running", key=KEY), Fault(2, 2.0, "k8s_reclaim_running", key=KEY)]
    assert invariants.interruptions({KEY: 2}, reclaims, {}).ok
    assert not invariants.interruptions({KEY: 1}, reclaims, {}).ok  # one reclaim was not recorded
    assert not invariants.interruptions({KEY: 3}, reclaims, {}).ok  # one recorded that never happened
    assert invariants.interruptions({KEY: 3}, reclaims, {KEY: 1}).ok  # a drain's eviction may count
    skipped = [Fault(1, 1.0, "k8s_reclaim_running", key=KEY, outcome="skipped")]
    assert not invariants.interruptions({KEY: 1}, skipped, {}).ok
    # two faults that found the same pod in their phase reclaimed it once (the sixth soak, shard 23)
    twice = [Fault(n, n, "k8s_reclaim_after_result", target="p-1", key=KEY, pod_outcome="Failed") for n in (1, 2)]
    assert invariants.interruptions({KEY: 1}, twice, {}).ok
    # try 2 took over the pod try 1's trigger made after a drain evicted try 1's pod: it carries that eviction
    second = (*KEY[:4], 2)
    assert invariants.interruptions({second: 1}, [], {KEY: 1}).ok
    assert not invariants.interruptions({second: 1}, [], {}).ok


def test_a_node_loss_is_an_interruption_only_when_it_ended_the_job() -> None:
    """Batch fails a multi-node job's child node alone when its host goes: the job ends FAILED once the training's
    main node fails on its lost peer (an interruption the provider resubmits and records), or SUCCEEDED when the
    main node had finished first (none)."""
    failed = [Fault(1, 1.0, "batch_node_loss", target="j#1", key=KEY, pod_outcome="FAILED")]
    assert invariants.interruptions({KEY: 1}, failed, {}).ok
    assert not invariants.interruptions({KEY: 0}, failed, {}).ok
    finished = [Fault(1, 1.0, "batch_node_loss", target="j#1", key=KEY, pod_outcome="SUCCEEDED")]
    assert invariants.interruptions({KEY: 0}, finished, {}).ok
    assert not invariants.interruptions({KEY: 1}, finished, {}).ok


def test_results_and_run_bounds() -> None:
    assert invariants.results({KEY[:4]: {"score": 1}}, {KEY[:4]: {"score": 1}}).ok
    assert not invariants.results({KEY[:4]: {"score": 1}}, {KEY[:4]: None}).ok
    runs = [{"dag_id": "d", "run_id": "r", "state": "success", "seconds": 50.0}]
    assert invariants.runs_within(runs, 60).ok
    assert not invariants.runs_within(runs, 40).ok
    assert not invariants.runs_within([{"dag_id": "d", "run_id": "r", "state": "running"}], 60).ok


def ti(state: str = "success") -> dict[str, object]:
    return {"dag_id": KEY[0], "task_id": KEY[1], "dag_run_id": KEY[2], "map_index": KEY[3], "state": state,
            "try_number": 1}  # fmt: skip


def test_a_reclaim_before_the_exit_needs_a_re_run_and_one_after_success_forbids_it() -> None:
    hit = pod("a", 0, 10)
    rerun = pod("b", 12, 20, "Succeeded")
    for kind in ("k8s_reclaim_pulling", "k8s_reclaim_after_result"):
        reclaim = Fault(1, 10.0, kind, key=KEY, pod_outcome="Failed")
        assert invariants.reclaims_by_phase([hit, rerun], [reclaim], [ti()], {KEY[:4]: {"score": 1}}).ok
        alone = invariants.reclaims_by_phase([hit], [reclaim], [ti()], {KEY[:4]: {"score": 1}})
        assert len(alone.violations) == 1 and "never run again" in alone.violations[0]
    # the pod exited 0 before the reclaim reached it: a reclaim after success, no re-run allowed
    beaten = Fault(1, 10.0, "k8s_reclaim_after_result", key=KEY, pod_outcome="Succeeded")
    done = pod("a", 0, 9, "Succeeded")
    assert invariants.reclaims_by_phase([done], [beaten], [ti()], {KEY[:4]: {"score": 1}}).ok
    assert not invariants.reclaims_by_phase([done, rerun], [beaten], [ti()], {KEY[:4]: {"score": 1}}).ok


def test_a_reclaim_after_success_requires_the_success_and_its_result() -> None:
    done = pod("a", 0, 9, "Succeeded")
    after = Fault(1, 9.5, "k8s_reclaim_after_success", key=KEY, pod_outcome="Succeeded")
    assert invariants.reclaims_by_phase([done], [after], [ti()], {KEY[:4]: {"score": 1}}).ok
    rerun = invariants.reclaims_by_phase([done, pod("b", 12, 20, "Succeeded")], [after], [ti()], {KEY[:4]: 1})
    assert len(rerun.violations) == 1 and "run again" in rerun.violations[0]
    no_xcom = invariants.reclaims_by_phase([done], [after], [ti()], {KEY[:4]: None})
    assert len(no_xcom.violations) == 1 and "no result XCom" in no_xcom.violations[0]
    assert not invariants.reclaims_by_phase([done], [after], [ti("failed")], {}).ok
    # a person cleared the task after the reclaim: the re-run is theirs, not the provider's
    clear = Fault(2, 11.0, "clear_running", instance=KEY[:4])
    assert invariants.reclaims_by_phase([done, pod("b", 12, 20, "Succeeded")], [after, clear], [ti()], {KEY[:4]: 1}).ok
    # a person marked the task failed a second before the reclaim was drawn, with the pod alive: the end is theirs
    of_a = Fault(1, 9.5, "k8s_reclaim_after_success", target="a", key=KEY, pod_outcome="Succeeded")
    marked = Fault(2, 9.0, "mark_failed", instance=KEY[:4])
    assert invariants.reclaims_by_phase([done], [of_a, marked], [ti("failed")], {}).ok
    # Marked before the pod existed (the tenth soak: Mark Success at 4.2 s, the try, not told yet, made its pod
    # at 6 s): a mark is the instance's final state whenever it came, and no later try follows it (a Clear acts
    # on a running instance only), so the pod's success and result are not the task's.
    long_before = Fault(2, -1.0, "mark_success", instance=KEY[:4])
    assert invariants.reclaims_by_phase([done], [of_a, long_before], [ti()], {KEY[:4]: None}).ok
    cleared_before = Fault(2, -1.0, "clear_running", instance=KEY[:4])  # a Clear starts the try that must read it
    assert not invariants.reclaims_by_phase([done], [of_a, cleared_before], [ti()], {KEY[:4]: None}).ok
    skipped = Fault(1, 9.5, "k8s_reclaim_after_success", key=KEY, outcome="skipped")
    assert invariants.reclaims_by_phase([done, pod("b", 12, 20)], [skipped], [ti()], {}).checked == 0


def test_a_reclaim_drawn_before_its_pod_was_made_judges_the_pods_made_after_that_pod() -> None:
    """A fault is drawn, then waits for a pod in its phase (``AIM_SECONDS``): the pod it reclaims, and one
    the try made before it, can both be younger than the draw. Neither is a re-run (soak seed 9 called
    the reclaimed pod itself "run again 1.3 s after"); a pod made after the reclaimed one is."""
    first, done = pod("a", 6, 7), pod("b", 8, 9, "Succeeded")
    after = Fault(1, 5.0, "k8s_reclaim_after_success", target="b", key=KEY, pod_outcome="Succeeded")
    assert invariants.reclaims_by_phase([first, done], [after], [ti()], {KEY[:4]: {"score": 1}}).ok
    again = invariants.reclaims_by_phase([first, done, pod("c", 12, 20)], [after], [ti()], {KEY[:4]: 1})
    assert [v.split(": ", 1)[1] for v in again.violations] == [
        "the pod had succeeded, and was run again (a pod made 4.0 s after it)"
    ]
    pulling = Fault(2, 5.0, "k8s_reclaim_pulling", target="a", key=KEY, pod_outcome="Failed")
    assert invariants.reclaims_by_phase([first, done], [pulling], [ti()], {KEY[:4]: 1}).ok  # b is the re-run
    assert not invariants.reclaims_by_phase([first], [pulling], [ti()], {KEY[:4]: 1}).ok
    # a machine of a training Job: its sibling ranks, made just after it, are not re-runs; the next Job's are
    rank0 = Workload("kubernetes", "job-0", KEY, 6.0, ended=9, outcome="Succeeded", group="job")
    rank1 = Workload("kubernetes", "job-1", KEY, 6.01, ended=9, outcome="Succeeded", group="job")
    trained = Fault(3, 5.0, "k8s_reclaim_after_success", target="job-0", key=KEY, group="job", pod_outcome="Succeeded")
    assert invariants.reclaims_by_phase([rank0, rank1], [trained], [ti()], {KEY[:4]: 1}).ok
    rerun = Workload("kubernetes", "job2-0", KEY, 12.0, group="job2")
    assert not invariants.reclaims_by_phase([rank0, rank1, rerun], [trained], [ti()], {KEY[:4]: 1}).ok


def test_interruptions_count_a_training_job_once_and_no_reclaim_after_success() -> None:
    ranks = [Fault(1, 1.0, "k8s_reclaim_running", key=KEY, group="job-a"),
             Fault(2, 1.2, "k8s_reclaim_running", key=KEY, group="job-a")]  # fmt: skip
    assert invariants.interruptions({KEY: 1}, ranks, {}).ok  # both machines of one Job: one Job ended
    assert not invariants.interruptions({KEY: 2}, ranks, {}).ok
    two_jobs = [*ranks, Fault(3, 9.0, "k8s_reclaim_running", key=KEY, group="job-b")]
    assert invariants.interruptions({KEY: 2}, two_jobs, {}).ok
    after = [Fault(1, 1.0, "k8s_reclaim_after_result", key=KEY, pod_outcome="Succeeded"),
             Fault(2, 2.0, "k8s_reclaim_after_success", key=KEY, pod_outcome="Succeeded")]  # fmt: skip
    assert invariants.interruptions({KEY: 0}, after, {}).ok
    assert not invariants.interruptions({KEY: 1}, after, {}).ok  # a success recorded as an interruption
    stopped = [Fault(1, 1.0, "k8s_reclaim_after_result", key=KEY, pod_outcome="Failed")]
    assert invariants.interruptions({KEY: 1}, stopped, {}).ok
    assert not invariants.interruptions({KEY: 0}, stopped, {}).ok
    # aimed at a Running pod that had exited 0 240 ms before (the twentieth soak): no interruption either
    late = [Fault(1, 1.0, "k8s_reclaim_running", target="p", key=KEY, pod_outcome="Succeeded")]
    assert invariants.interruptions({KEY: 0}, late, {}).ok
    assert not invariants.interruptions({KEY: 1}, late, {}).ok
    running = [Fault(1, 1.0, "k8s_reclaim_running", target="p", key=KEY, pod_outcome="Failed")]
    assert not invariants.interruptions({KEY: 0}, running, {}).ok


def test_the_machines_of_one_training_job_live_together_and_two_jobs_of_a_try_never() -> None:
    def rank(name: str, job: str, created: float, ended: float | None) -> Workload:
        machine = pod(name, created, ended)
        machine.group = job
        return machine

    one_job = [rank("a-0", "a", 0, 10), rank("a-1", "a", 0.1, 9)]
    assert invariants.one_live_per_try(one_job).ok
    replaced = [*one_job, rank("b-0", "b", 10.5, 20), rank("b-1", "b", 10.6, 20)]
    assert invariants.one_live_per_try(replaced).ok
    early = [*one_job, rank("b-0", "b", 9.5, 20), rank("b-1", "b", 9.6, 20)]  # a-0 still live at 9.5
    verdict = invariants.one_live_per_try(early)
    assert len(verdict.violations) == 1 and "Job b" in verdict.violations[0]


def test_training_jobs_one_live_per_try_each_with_its_service() -> None:
    def obj(kind: str, name: str, created: float, ended: float | None) -> Workload:
        return Workload(kind, name, KEY, created, ended=ended)

    good = [obj("service", "a", 0, 10), obj("job", "a", 0.1, 10), obj("service", "b", 11, 20), obj("job", "b", 11, 20)]
    assert invariants.training_jobs(good).ok and invariants.training_jobs(good).checked == 2
    overlapping = [obj("service", "a", 0, 10), obj("job", "a", 0.1, 10), obj("service", "b", 5, 20),
                   obj("job", "b", 5, 20)]  # fmt: skip
    assert not invariants.training_jobs(overlapping).ok
    assert not invariants.training_jobs([obj("job", "a", 0.1, 10)]).ok  # no headless Service: no rendezvous


def test_a_training_result_is_judged_by_its_shape() -> None:
    from airflow_gpu.testing.soak.soak_dags import training_result_problem

    whole = {"losses": [0.9, 0.3, 0.1, 0.05], "ranks": [0, 1], "machines": [0, 1], "world_size": 2, "start_epoch": 0}
    assert training_result_problem(whole, epochs=4) is None
    resumed = {**whole, "losses": [0.1], "start_epoch": 3}
    assert training_result_problem(resumed, epochs=4) is None
    done_before = {**whole, "losses": [], "start_epoch": 4, "attempt": 2}  # reclaimed after its final checkpoint
    assert training_result_problem(done_before, epochs=4) is None
    assert training_result_problem({**done_before, "attempt": 1}, epochs=4)  # a first attempt that trained nothing
    # ...unless a later try made it: the earlier try's Job trained to the end and failed after its result line
    # (its worker killed, its main machine reclaimed), and the retry's first Job resumed at the last epoch
    assert training_result_problem({**done_before, "attempt": 1}, epochs=4, try_number=2) is None
    assert training_result_problem({**done_before, "attempt": 1, "start_epoch": 5}, epochs=4, try_number=2)
    assert training_result_problem({**done_before, "start_epoch": 5}, epochs=4)  # past the last epoch
    assert training_result_problem({**whole, "losses": [0.1]}, epochs=4)  # stopped early
    assert training_result_problem({**whole, "machines": [0]}, epochs=4)  # both ranks on one machine
    assert training_result_problem(None, epochs=4) == "no result"
    verdict = invariants.training_results({KEY[:4]: None}, training_result_problem)
    assert len(verdict.violations) == 1
    first_try_nothing = {KEY[:4]: {**done_before, "attempt": 1}}
    assert len(invariants.training_results(first_try_nothing, training_result_problem).violations) == 1
    assert invariants.training_results(first_try_nothing, training_result_problem, {KEY[:4]: 2}).ok


def test_a_try_that_took_over_an_earlier_try_s_job_may_record_the_reclaims_on_it() -> None:
    second = (*KEY[:4], 2)
    on_first = [Fault(1, 1.0, "k8s_reclaim_running", key=KEY, group="job-r1")]  # the pods carry try 1's number
    assert invariants.interruptions({second: 1}, on_first, {}).ok  # try 2 adopted job-r1, then it was reclaimed
    assert invariants.interruptions({second: 0}, on_first, {}).ok  # or it was reclaimed before the takeover
    assert not invariants.interruptions({second: 2}, on_first, {}).ok  # one more than any try's reclaims
    later = [Fault(1, 1.0, "k8s_reclaim_running", key=(*KEY[:4], 3))]  # a later try's reclaim is not try 2's
    assert not invariants.interruptions({second: 1}, later, {}).ok


def test_an_ended_pod_still_held_is_the_reaper_s_to_let_go_not_a_live_orphan() -> None:
    """``airflow-gpu reap`` lists a pod the provider's finalizer still holds once it ended (its try died before
    it let go): nothing runs there, so it is reported, not a violation; a live orphan still is one."""
    import json

    held = {"name": "shard-1", "status": "Succeeded, held (being deleted)"}
    live = {"name": "shard-2", "status": "Running"}
    only_held = json.dumps({"orphans": [held]})
    assert invariants.held_by_reap(only_held) == ["shard-1"]
    assert invariants.no_orphans([], only_held, 1)[0].ok
    both = json.dumps({"orphans": [held, live]})
    verdict, _ = invariants.no_orphans([], both, 2)
    assert not verdict.ok and "1 live orphan(s)" in verdict.violations[0]
    assert invariants.held_by_reap("reap exited 2: ...") == []
    assert not invariants.no_orphans([], "reap exited 2: ...", -1)[0].ok  # a reap that failed is no pass


def test_what_a_mark_left_while_the_trigger_ran_nowhere_is_the_reaper_s_when_it_finds_it() -> None:
    """The seventeenth soak: a trigger replacing a training Job created the next Job's Service, then its
    triggerer was killed; 22 s later, before another triggerer took the trigger (Airflow waits 30 s), a person
    marked the deferred task failed. No code of the provider runs then, so the Service stayed: allowed when the
    reaper finds it, and not when the trigger wrote after the kill, the kill came long before the mark, the
    task was running rather than deferred, or the mark was on another try."""
    import json

    service = Workload("service", "train-r1", KEY, 100.0)
    kill = Fault(1, 100.5, "kill_triggerer", "triggerer-1")
    mark = Fault(2, 122.0, "mark_failed", detail="was deferred", key=KEY, instance=KEY[:4])
    reaped = json.dumps({"orphans": [{"name": "service/train-r1", "status": "no Job"}]})
    verdict, stranded = invariants.no_orphans([service], reaped, 1, [kill, mark], {KEY: 100.1})
    assert verdict.ok and len(stranded) == 1 and "left by #2 mark_failed" in stranded[0]
    assert not invariants.no_orphans([service], json.dumps({"orphans": []}), 0, [kill, mark], {KEY: 100.1})[0].ok
    assert not invariants.no_orphans([service], reaped, 1, [kill, mark], {KEY: 101.0})[0].ok  # it ran on
    early = Fault(1, 90.0, "kill_triggerer", "triggerer-1")  # 32 s before the mark: another triggerer took it
    assert not invariants.no_orphans([service], reaped, 1, [early, mark], {KEY: 80.0})[0].ok
    running = Fault(2, 122.0, "mark_failed", detail="was running", key=KEY, instance=KEY[:4])
    assert not invariants.no_orphans([service], reaped, 1, [kill, running], {KEY: 100.1})[0].ok
    other_try = Fault(2, 122.0, "mark_failed", detail="was deferred", key=(*KEY[:4], 2), instance=KEY[:4])
    assert not invariants.no_orphans([service], reaped, 1, [kill, other_try], {KEY: 100.1})[0].ok


def test_a_judged_training_job_and_its_service_are_not_live() -> None:
    """A kill keeps a Job its controller judged for the task that reads it (``kill_spare``): it and its Service
    hold nothing more. One not judged stays live until its deletion."""
    from airflow_gpu.testing.soak.observer import Observer

    observer = Observer.__new__(Observer)  # the bookkeeping only: no emulator to follow here
    observer.objects, observer.lock, observer.stop = {}, __import__("threading").Lock(), __import__("threading").Event()
    marks = {"labels": {"airflow-gpu/accelerator": "h100", "airflow-gpu/training-job": "train-a"}}
    for kind, uid in (("job", "j"), ("service", "s")):
        observer._on_object(kind, "ADDED", {"metadata": {"name": "train-a", "uid": uid, **marks}}, uid, 1.0)
    assert len(observer.live_objects()) == 2
    done = {"metadata": {"name": "train-a", "uid": "j", **marks},
            "status": {"conditions": [{"type": "Complete", "status": "True"}]}}  # fmt: skip
    observer._on_object("job", "MODIFIED", done, "j", 2.0)
    assert observer.live_objects() == []


def test_a_drain_counts_the_pods_it_evicted_by_name_even_one_made_after_it_was_drawn() -> None:
    """The eighth soak: a drain drawn at 51.4 s evicted at 53.2 s a pod made at 53.0 s; counted by the fault's
    moment, that eviction was no drain's, and the try's second recorded interruption a mismatch. The pods a
    drain names are counted, on that node (or not seen placed yet), and no other."""
    from types import SimpleNamespace

    from airflow_gpu.testing.soak.runner import drain_evictions

    early, late, elsewhere = pod("early", 40.0, None), pod("late", 53.0, None), pod("elsewhere", 30.0, None)
    early.node, elsewhere.node = "gpu-spot-1", "gpu-spot-2"
    other = (*KEY[:4], 2)
    unseen = pod("unseen", 52.0, None, key=other)  # evicted before the observer saw it placed
    observer = SimpleNamespace(pods={p.name + "-uid": p for p in (early, late, elsewhere, unseen)})
    drain = Fault(1, 51.4, "k8s_node_drain", target="gpu-spot-1", evicted=("early", "late", "unseen"))
    skipped = Fault(2, 60.0, "k8s_node_drain", outcome="skipped", evicted=("elsewhere",))
    assert drain_evictions(observer, [drain, skipped]) == {KEY: 2, other: 1}  # type: ignore[arg-type]


def test_a_reclaim_of_a_machine_of_a_training_whose_main_machine_finished_is_no_interruption() -> None:
    """The eighth soak: rank 1 was reclaimed at torch's exit barrier once rank 0 had printed its result, and the
    provider ran the finished training again. A Job whose main machine (rank 0) ended ``Succeeded`` finished:
    its other machines' reclaims are none, and recording one is a mismatch."""

    def machine(name: str, job: str, rank: str, outcome: str) -> Workload:
        made = pod(name, 0, 10, outcome)
        made.group, made.marks = job, {"labels": {"batch.kubernetes.io/job-completion-index": rank}}
        return made

    history = [machine("a-0", "a", "0", "Succeeded"), machine("a-1", "a", "1", "Failed"),
               machine("b-0", "b", "0", "Failed"), machine("b-1", "b", "1", "Succeeded")]  # fmt: skip
    finished = invariants.finished_trainings(history)
    assert finished == {"a"}  # b's main machine failed: its rank 1's success finishes nothing
    late = [Fault(1, 9.0, "k8s_reclaim_running", key=KEY, group="a")]
    assert invariants.interruptions({KEY: 0}, late, {}, finished).ok
    assert not invariants.interruptions({KEY: 1}, late, {}, finished).ok
    early = [Fault(1, 5.0, "k8s_reclaim_running", key=KEY, group="b")]
    assert invariants.interruptions({KEY: 1}, early, {}, finished).ok


def test_only_the_main_machines_success_is_the_trainings_for_starts_after_it_once_a_fault_hit_the_job() -> None:
    """A training's rank 1 exits 0 after the last gather, before rank 0 prints the result: a reclaim of rank 0 in
    between leaves no result, and the next Job is the training run again rightly, not a start after a success.
    Without a fault on the Job, rank 1's success counts (a provider that ended the Job on it would be caught);
    once rank 0 succeeded, a new Job's machine is a start after a success whatever hit the Job."""

    def machine(name: str, job: str, rank: str, created: float, ended: float, outcome: str) -> Workload:
        made = pod(name, created, ended, outcome)
        made.group, made.marks = job, {"labels": {"batch.kubernetes.io/job-completion-index": rank}}
        return made

    rank_1_done = [machine("a-1", "a", "1", 0, 10, "Succeeded"), machine("a-0", "a", "0", 0, 10.5, "Failed")]
    again = [machine("b-0", "b", "0", 13, 30, "Succeeded"), machine("b-1", "b", "1", 13, 30, "Succeeded")]
    reclaim = Fault(1, 10.2, "k8s_reclaim_running", target="a-0", key=KEY, group="a", pod_outcome="Failed")
    assert invariants.no_start_after_success([*rank_1_done, *again], [reclaim]).ok
    drain = Fault(1, 10.2, "k8s_node_drain", target="node-1", evicted=("a-0",))
    assert invariants.no_start_after_success([*rank_1_done, *again], [drain]).ok
    unhit = invariants.no_start_after_success([*rank_1_done, *again], [])
    assert len(unhit.violations) == 2 and "b-0 created 3.0s after a success" in unhit.violations[0]
    main_done = [machine("a-0", "a", "0", 0, 10, "Succeeded"), machine("a-1", "a", "1", 0, 10.5, "Failed")]
    verdict = invariants.no_start_after_success([*main_done, *again], [reclaim])
    assert len(verdict.violations) == 2 and "b-0 created 3.0s after a success" in verdict.violations[0]


def test_a_running_reclaim_whose_pod_had_exited_0_is_judged_as_one_after_success() -> None:
    """The twentieth soak: aimed at a Running pod 240 ms after it exited 0; the task must end success with its
    result and run nothing again, as for a reclaim after success."""
    done = pod("a", 0, 9, "Succeeded")
    late = Fault(1, 9.2, "k8s_reclaim_running", target="a", key=KEY, pod_outcome="Succeeded")
    assert invariants.reclaims_by_phase([done], [late], [ti()], {KEY[:4]: {"score": 1}}).checked == 1
    assert invariants.reclaims_by_phase([done], [late], [ti()], {KEY[:4]: {"score": 1}}).ok
    rerun = invariants.reclaims_by_phase([done, pod("b", 12, 20, "Succeeded")], [late], [ti()], {KEY[:4]: 1})
    assert len(rerun.violations) == 1 and "run again" in rerun.violations[0]
    assert not invariants.reclaims_by_phase([done], [late], [ti()], {KEY[:4]: None}).ok
