"""``GPUBatchOperator.execute`` in this process against the AWS Batch emulator (moto's HTTP server,
jobs run as local processes, CloudWatch events readable only after an ingestion delay).

The fakes are at a boundary this project owns: ``Ti`` and ``Store`` stand in for Airflow's task
instance and task state store (the end-to-end tests run the same paths through a real Airflow).
Every expectation is AWS Batch's documented behaviour: CancelJob does nothing to a job that
already left RUNNABLE, most stuck jobs carry no status reason, logs live in the job's own group.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from typing import Any

import pytest

from airflow_gpu.operators.batch import STATE_KEY, GPUBatchOperator
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.polling import wait_for
from tests.operators.conftest import LOG_INGESTION_DELAY, LOG_LAG
from tests.operators.task_context import Store, Ti

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_backoff")]
QUEUES = {"spot": "gpu-spot", "on-demand": "gpu-on-demand"}
RESULT = "print('::airflow-gpu-result::' + '{\"loss\": 0.25}')"


def operator(**kwargs: Any) -> GPUBatchOperator:
    kwargs.setdefault("accelerator", "A10G:1")
    kwargs.setdefault("job_queues", QUEUES)
    kwargs.setdefault("command", [sys.executable, "-c", RESULT])
    spot = {"capacity_timeout": 1.0, **kwargs.pop("spot", {})}
    # log_lag: twice the emulator's ingestion delay is the bound on it here (conftest), as 10 s is on AWS.
    return GPUBatchOperator(
        task_id="train", poll_interval=0.2, awslogs_fetch_interval=0.5, log_lag=LOG_LAG, spot=spot, **kwargs
    )


def stopped_at(attempt: dict[str, Any]) -> str:
    """An attempt's ``stoppedAt`` (epoch milliseconds) as an interruption record's ``time``."""
    return datetime.fromtimestamp(attempt["stoppedAt"] / 1000, timezone.utc).isoformat()


def described(emulator: BatchEmulator) -> list[dict[str, Any]]:
    ids = [job.job_id for job in emulator.jobs()]
    jobs = emulator.client("batch").describe_jobs(jobs=ids)["jobs"] if ids else []
    return sorted(jobs, key=lambda j: j["createdAt"])


def test_a_job_that_starts_just_before_its_capacity_cancel_is_followed_not_replaced(
    aws_default_connection: BatchEmulator,
) -> None:
    """Behaviour 1: the job leaves RUNNABLE between the describe and the CancelJob (which then does
    nothing, as on AWS). The race is forced at the boto3 client: capacity comes back, and only once
    the job is STARTING or RUNNING does the real CancelJob go out."""
    emulator = aws_default_connection
    emulator.stall("gpu-spot-ce", reason=None)
    lasting = f"import time; time.sleep(1); {RESULT}"  # runs long enough to be seen RUNNING
    op = operator(command=[sys.executable, "-c", lasting])
    client = op.gpu_hook.api
    real_cancel, cancels = client.cancel_job, []

    def cancel_after_it_started(**kwargs: Any) -> Any:
        emulator.release("gpu-spot-ce")
        job = emulator._job(kwargs["jobId"])
        wait_for(lambda: job.status in ("STARTING", "RUNNING"), timeout=30, what="the job to start")
        cancels.append(kwargs)
        return real_cancel(**kwargs)

    client.cancel_job = cancel_after_it_started
    ti = Ti()
    assert op.execute({"ti": ti, "task_state_store": Store()}) == {"loss": 0.25}
    (job,) = described(emulator)
    assert len(cancels) == 1 and job["status"] == "SUCCEEDED" and len(job["attempts"]) == 1
    assert ti.xcom["gpu_interruptions"] == [] and ti.xcom["gpu_accelerator"]["capacity"] == "spot"


def test_runnable_past_capacity_timeout_without_any_reason_moves_on(aws_default_connection: BatchEmulator) -> None:
    """Behaviour 2 and 5: AWS gives no reason (the service role may not read scaling activities);
    RUNNABLE past capacity_timeout is enough. Each resubmission is built afresh: the next
    candidate's requirements, every variable once, the rendered job name with the map index."""
    from jinja2 import Environment

    emulator = aws_default_connection
    emulator.stall("gpu-spot-ce", reason=None)
    op = operator(
        accelerator=["A10G:4", "L4:1"], job_name="train-{{ ds }}", environment={"EPOCHS": "3"},
        container_overrides={"environment": [{"name": "EPOCHS", "value": "1"}, {"name": "SEED", "value": "7"}]},
    )  # fmt: skip
    op.render_template_fields({"ds": "2026-11-23"}, jinja_env=Environment())  # type: ignore[arg-type]
    ti = Ti(map_index=2)
    assert op.execute({"ti": ti, "task_state_store": Store()}) == {"loss": 0.25}
    first, second, third = described(emulator)
    for cancelled in (first, second):
        assert cancelled["status"] == "FAILED" and not cancelled.get("attempts")
        assert "capacity_timeout" in cancelled["statusReason"] and "AWS gave no reason" in cancelled["statusReason"]
    queues = [j["jobQueue"].rsplit("/", 1)[-1] for j in (first, second, third)]
    assert queues == ["gpu-spot", "gpu-spot", "gpu-on-demand"]
    name = "train-2026-11-23-m2"
    assert [j["jobName"] for j in (first, second, third)] == [name, f"{name}-r1", f"{name}-r2"]
    asked = {job.job_id: job.resources()["GPU"] for job in emulator.jobs()}  # what each SubmitJob asked for
    assert [asked[j["jobId"]] for j in (first, second, third)] == [4, 1, 4]  # on-demand starts from the first
    names = [e["name"] for e in third["container"]["environment"] if not e["name"].startswith("AWS_BATCH")]
    assert len(names) == len(set(names))
    env = {e["name"]: e["value"] for e in third["container"]["environment"]}
    assert env["EPOCHS"] == "3" and env["SEED"] == "7" and env["AIRFLOW_GPU_ATTEMPT"] == "3"
    assert env["AIRFLOW_GPU_ACCELERATOR"] == "A10G:4" and env["AIRFLOW_GPU_CAPACITY"] == "on-demand"
    assert ti.xcom["gpu_interruptions"] == []  # no capacity is not an interruption


def test_results_come_from_the_jobs_own_log_group(aws_default_connection: BatchEmulator) -> None:
    """Behaviour 3: a job definition with its own ``awslogs-group``; the result line is read there,
    after the emulator's ingestion delay, as ``get_job_all_awslogs_info`` locates it."""
    emulator = aws_default_connection
    emulator.client("logs").create_log_group(logGroupName="/ml/train")
    arn = emulator.client("batch").register_job_definition(
        jobDefinitionName="mine",
        type="container",
        containerProperties={
            "image": "busybox",
            "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "1024"}],
            "logConfiguration": {"logDriver": "awslogs", "options": {"awslogs-group": "/ml/train"}},
        },
    )["jobDefinitionArn"]
    op = operator(job_definition=arn)
    assert op.execute({"ti": Ti(), "task_state_store": Store()}) == {"loss": 0.25}
    (job,) = described(emulator)
    assert job["container"]["logConfiguration"]["options"]["awslogs-group"] == "/ml/train"
    assert op.gpu_hook.get_job_all_awslogs_info(job["jobId"])[0]["awslogs_group"] == "/ml/train"


def test_a_retry_after_a_crash_takes_the_succeeded_job_without_a_new_submission(
    aws_default_connection: BatchEmulator,
) -> None:
    """Behaviour 4: the first try's process died after SubmitJob; the job SUCCEEDED meanwhile."""
    emulator, store = aws_default_connection, Store()
    operator().submit_job({"ti": Ti(try_number=1), "task_state_store": store})
    wait_for(lambda: described(emulator)[0]["status"] == "SUCCEEDED", timeout=60)
    assert operator().execute({"ti": Ti(try_number=2), "task_state_store": store}) == {"loss": 0.25}
    assert len(emulator.jobs()) == 1 and store[STATE_KEY]["open"] is False


def test_a_retry_after_a_crash_restores_the_state_before_deciding_on_a_failed_job(
    aws_default_connection: BatchEmulator, tmp_path: Any
) -> None:
    """Behaviour 4: the job was reclaimed past the budget while no process watched it: the retry
    records the interruption (at the time the attempt stopped, not when the retry saw it) and falls
    back to on-demand, where the job runs again."""
    emulator, store, hold = aws_default_connection, Store(), tmp_path / "release"
    wait = f"import os, time\nwhile not os.path.exists({str(hold)!r}): time.sleep(0.1)\n"  # the test says when
    command = [sys.executable, "-c", wait + RESULT]
    operator(command=command, spot={"max_interruptions": 0}).submit_job({"ti": Ti(), "task_state_store": store})
    wait_for(lambda: described(emulator)[0]["status"] == "RUNNING", timeout=60)
    emulator.reclaim(described(emulator)[0]["jobId"])
    wait_for(lambda: described(emulator)[0]["status"] == "FAILED", timeout=60)
    hold.touch()
    ti = Ti(try_number=2)
    op = operator(command=command, spot={"max_interruptions": 0})
    assert op.execute({"ti": ti, "task_state_store": store}) == {"loss": 0.25}
    first, second = described(emulator)
    assert second["jobQueue"].endswith("/gpu-on-demand")
    (interruption,) = ti.xcom["gpu_interruptions"]
    assert interruption["workload"] == first["jobId"] and interruption["outcome"] == "preempted"
    assert interruption["time"] == stopped_at(first["attempts"][-1])
    env = {e["name"]: e["value"] for e in second["container"]["environment"]}
    assert env["AIRFLOW_GPU_ATTEMPT"] == "2" and env["AIRFLOW_GPU_INTERRUPTIONS"] == "1"


def test_a_later_airflow_retry_never_takes_over_a_job_an_earlier_try_judged(
    aws_default_connection: BatchEmulator,
) -> None:
    """A try that ended by itself (here: the bug failed it) closes its state: Airflow's retry starts afresh."""
    emulator, store = aws_default_connection, Store()
    failing = [sys.executable, "-c", "raise SystemExit(3)"]
    with pytest.raises(Exception, match="the application failed"):
        operator(command=failing).execute({"ti": Ti(), "task_state_store": store})
    with pytest.raises(Exception, match="the application failed"):
        operator(command=failing).execute({"ti": Ti(try_number=2), "task_state_store": store})
    assert len(emulator.jobs()) == 2


def test_describe_jobs_throttling_is_ridden_out(aws_default_connection: BatchEmulator) -> None:
    """Behaviour 6: DescribeJobs answers TooManyRequestsException more often than botocore's own
    retries (5 attempts a call) absorb; the hook backs off and asks again, and the task goes on."""
    emulator = aws_default_connection
    op = operator()
    emulator.throttle("DescribeJobs", times=6)
    assert op.execute({"ti": Ti(), "task_state_store": Store()}) == {"loss": 0.25}


def test_a_job_this_task_killed_is_never_taken_over(aws_default_connection: BatchEmulator) -> None:
    """Mark Failed on a deferred task: the trigger's ``on_kill`` terminates the job, but cannot close
    the task's saved state. The next try sees the kill in the job's status reason and starts afresh,
    instead of taking over a job that ended with SIGTERM (exit 143) and calling it a bug."""
    from airflow_gpu.spot.batch import KILLED

    emulator, store = aws_default_connection, Store()
    slow = [sys.executable, "-c", f"import time; time.sleep(30); {RESULT}"]  # runs until the test kills it
    operator(command=slow).submit_job({"ti": Ti(), "task_state_store": store})
    first = described(emulator)[0]["jobId"]
    wait_for(lambda: described(emulator)[0]["status"] == "RUNNING", timeout=60, what="the job to run")
    emulator.client("batch").terminate_job(jobId=first, reason=KILLED[0])
    wait_for(lambda: described(emulator)[0]["status"] == "FAILED", timeout=60, what="the job to stop")
    assert operator().execute({"ti": Ti(try_number=2), "task_state_store": store}) == {"loss": 0.25}
    assert len(emulator.jobs()) == 2


def test_a_job_the_queues_time_limit_cancelled_moves_on_as_unschedulable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behaviour 2: the spot queue's own ``jobStateTimeLimitActions`` cancels the stuck job before
    our ``capacity_timeout``: no capacity (on-demand next), not an infrastructure failure. Also the
    console links ``BatchOperator`` gives: job, definition, queue and CloudWatch."""
    from dataclasses import replace

    from airflow_gpu.testing.batch.compute import DEMO, QueueSpec

    limit = {"reason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", "state": "RUNNABLE", "action": "CANCEL"}
    limit["maxTimeSeconds"] = 1  # AWS's minimum is 600; the emulator takes less
    spot = QueueSpec("gpu-spot", ("gpu-spot-ce",), job_state_time_limit_actions=(limit,))
    setup = replace(DEMO, queues=(spot, DEMO.queues[1]))
    with BatchEmulator(setup, stop_timeout=2, log_ingestion_delay=LOG_INGESTION_DELAY) as emulator:
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", emulator.airflow_connection_uri())
        emulator.stall("gpu-spot-ce")
        ti = Ti()
        op = operator(spot={"capacity_timeout": 600})
        assert op.execute({"ti": ti, "task_state_store": Store()}) == {"loss": 0.25}
        cancelled, ran = described(emulator)
    assert cancelled["statusReason"].startswith("Canceled by JobStateTimeLimit action due to reason: CAPACITY:")
    assert ran["jobQueue"].endswith("/gpu-on-demand") and ti.xcom["gpu_interruptions"] == []
    assert {"batch_job_details", "batch_job_definition", "batch_job_queue", "cloudwatch_events"} <= set(ti.xcom)
    assert ti.xcom["batch_job_queue"]["job_queue_arn"] == ran["jobQueue"]


def test_a_deferral_past_execution_timeout_terminates_its_job_and_closes_the_try(
    aws_default_connection: BatchEmulator,
) -> None:
    """Behaviour 6: Airflow resumes a deferred task that ran past ``execution_timeout`` only to fail it
    (``__fail__``); the job must not run on, billed, nor be taken over by the next try."""
    from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
    from airflow.sdk.exceptions import TaskDeferralTimeout

    from airflow_gpu.spot.batch import KILLED

    emulator, store = aws_default_connection, Store()
    slow = [sys.executable, "-c", f"import time; time.sleep(30); {RESULT}"]  # runs until the test kills it
    operator(command=slow, deferrable=True).submit_job({"ti": Ti(), "task_state_store": store})
    wait_for(lambda: described(emulator)[0]["status"] == "RUNNING", timeout=60, what="the job to run")
    resumed = operator(command=slow, deferrable=True)  # a fresh worker process
    failure = {"error": TriggerFailureReason.TRIGGER_TIMEOUT}
    with pytest.raises(TaskDeferralTimeout):
        resumed.resume_execution(TRIGGER_FAIL_REPR, failure, {"ti": Ti(), "task_state_store": store})  # type: ignore[arg-type]
    job = wait_for(lambda: (j := described(emulator)[0])["status"] == "FAILED" and j, timeout=60, what="the stop")
    assert job["statusReason"] == KILLED[1] and store[STATE_KEY]["open"] is False


def test_a_job_whose_log_group_does_not_exist_fails_at_once_naming_it(aws_default_connection: BatchEmulator) -> None:
    """Behaviour 6 of the real-cluster issue: a job definition that names a log group nobody created
    cannot start its container anywhere (``CannotStartContainerError: ... log group does not exist``,
    as ECS words it). One submission, then the task fails with that reason: no spot resubmissions,
    no on-demand fallback."""
    emulator = aws_default_connection
    arn = emulator.client("batch").register_job_definition(
        jobDefinitionName="no-group",
        type="container",
        containerProperties={
            "image": "busybox",
            "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "1024"}],
            "logConfiguration": {"logDriver": "awslogs", "options": {"awslogs-group": "/never/created"}},
        },
    )["jobDefinitionArn"]
    ti = Ti()
    with pytest.raises(Exception, match="could not start as configured.*log group does not exist") as raised:
        operator(job_definition=arn).execute({"ti": ti, "task_state_store": Store()})
    assert "not resubmitted" in str(raised.value)
    (job,) = described(emulator)
    assert job["status"] == "FAILED" and job["jobQueue"].endswith("/gpu-spot")
    assert ti.xcom.get("gpu_interruptions", []) == []


def result_warnings(logs: list[dict[str, Any]]) -> list[str]:
    """The warnings about the result: the operator's and its hook's, as structlog records them."""
    warnings = [e for e in logs if e["log_level"] == "warning"]
    said = [str(e.get("event", "")) % tuple(e.get("positional_args", ()) or ()) for e in warnings]
    return [s for s in said if "result" in s]


def test_a_success_without_a_result_line_returns_none_not_the_job_id(aws_default_connection: BatchEmulator) -> None:
    """Behaviour 8: BatchOperator returns the job id; a downstream task reading this task's return value
    must not take it for the workload's result. None, one warning saying why; the id stays in its own XCom."""
    from structlog.testing import capture_logs

    op = operator(command=[sys.executable, "-c", "print('trained, nothing to return')"], gpu_profile=False)
    ti = Ti()
    with capture_logs() as logs:
        assert op.execute({"ti": ti, "task_state_store": Store()}) is None
    (job,) = described(aws_default_connection)
    assert ti.xcom["batch_job_id"] == job["jobId"] and "return_value" not in ti.xcom
    (warning,) = result_warnings(logs)
    assert f"AWS Batch job {job['jobId']} succeeded" in warning and "printed no ::airflow-gpu-result:: line" in warning


def test_a_result_whose_log_cannot_be_read_is_none_with_the_reason(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's role may not read the job's log group (no ``logs:GetLogEvents``): CloudWatch answers
    AccessDeniedException. The job succeeded; the task returns None, saying the log could not be read."""
    from airflow.providers.amazon.aws.hooks.logs import AwsLogsHook
    from botocore.exceptions import ClientError
    from structlog.testing import capture_logs

    from airflow_gpu.hooks.batch import GPUBatchHook

    class Denied:
        def __init__(self, client: Any) -> None:
            self.client = client

        def __getattr__(self, name: str) -> Any:
            return getattr(self.client, name)

        def get_log_events(self, **kwargs: Any) -> Any:
            message = "User: arn:aws:sts::123456789012:assumed-role/worker is not authorized to perform: "
            message += "logs:GetLogEvents"
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": message}}, "GetLogEvents")

    real, logs_client = AwsLogsHook.conn, GPUBatchHook.logs_client
    monkeypatch.setattr(AwsLogsHook, "conn", property(lambda hook: Denied(real.func(hook))))  # type: ignore[attr-defined]
    monkeypatch.setattr(GPUBatchHook, "logs_client", lambda hook, job: Denied(logs_client(hook, job)))
    op = operator(gpu_profile=False)
    with capture_logs() as logs:
        assert op.execute({"ti": Ti(), "task_state_store": Store()}) is None  # it printed {"loss": 0.25}
    (warning,) = result_warnings(logs)
    assert "its log could not be read" in warning and "AccessDeniedException" in warning


def test_a_multi_node_job_without_a_result_returns_none(aws_default_connection: BatchEmulator) -> None:
    """AccelerateTrainOperator's Batch target of several machines: the main node's log has no result line."""
    from structlog.testing import capture_logs

    from airflow_gpu.operators.accelerate_batch import MultiNodeBatchOperator

    op = MultiNodeBatchOperator(
        task_id="train", accelerator="A10G:1", job_queue="gpu-on-demand", gpu_profile=False, poll_interval=0.2,
        awslogs_fetch_interval=0.5, log_lag=LOG_LAG, command=[sys.executable, "-c", "print('node done')"],
    )  # fmt: skip
    op.num_nodes = 2
    with capture_logs() as logs:
        assert op.execute({"ti": Ti(), "task_state_store": Store()}) is None
    (warning,) = result_warnings(logs)
    assert "printed no ::airflow-gpu-result:: line" in warning


#: Each node of a two-node job. On the first submission the main node waits on its peer for ever, as a training's
#: collective does until its timeout (30 minutes by default), and the peer runs until its host is lost; the next
#: submission trains through.
NODE_LOSS = """
import os, signal
node, attempt = os.environ["AWS_BATCH_JOB_NODE_INDEX"], os.environ["AIRFLOW_GPU_ATTEMPT"]
if attempt == "1":
    signal.pause()  # until stopped: its peer's host is lost, and the task stops the job
if node == "0":
    print('::airflow-gpu-result::{"loss": 0.25}')
"""


def multi_node(**kwargs: Any) -> Any:
    from airflow_gpu.operators.accelerate_batch import MultiNodeBatchOperator

    op = MultiNodeBatchOperator(
        task_id="train", accelerator="A10G:1", job_queue="gpu-on-demand", gpu_profile=False, poll_interval=0.2,
        awslogs_fetch_interval=0.5, log_lag=LOG_LAG, command=[sys.executable, "-c", NODE_LOSS], **kwargs,
    )  # fmt: skip
    op.num_nodes = 2
    return op


def lose_node_1_when_it_runs(emulator: BatchEmulator) -> str:
    """Fail the host of the first job's node 1 once it runs (Batch fails that node alone); the job's id."""
    batch = emulator.client("batch")
    wait_for(lambda: described(emulator), 60, "the job submitted")
    first = described(emulator)[0]["jobId"]
    node = lambda: batch.describe_jobs(jobs=[f"{first}#1"])["jobs"]  # noqa: E731
    wait_for(lambda: [j["status"] for j in node()] == ["RUNNING"], 60, "node 1 running")
    emulator.reclaim(f"{first}#1")
    return str(first)


def assert_node_loss_resubmitted(emulator: BatchEmulator, ti: Ti, first: str) -> None:
    jobs = described(emulator)
    assert [(j["jobId"] == first, j["status"], j["jobQueue"].rsplit("/", 1)[-1]) for j in jobs] == [
        (True, "FAILED", "gpu-on-demand"), (False, "SUCCEEDED", "gpu-on-demand")
    ]  # fmt: skip
    assert jobs[0]["statusReason"].startswith("airflow-gpu: a node of the job lost its host: node 1 (Host EC2")
    assert jobs[1]["createdAt"] >= jobs[0]["stoppedAt"]  # never two jobs of the try at once
    (interruption,) = ti.xcom["gpu_interruptions"]
    assert interruption["workload"] == first and interruption["outcome"] == "preempted"
    assert "node 1 lost its host (Host EC2" in interruption["message"]


def test_a_multi_node_job_whose_child_node_lost_its_host_is_stopped_and_resubmitted_as_an_interruption(
    aws_default_connection: BatchEmulator,
) -> None:
    """An on-demand node's host fails (MNP jobs run on no Spot): Batch fails that node alone and leaves the main
    node waiting on its lost peer. The task stops the job at its next poll and submits it again as the node's
    interruption, recorded; before, the job ran on until the collective's timeout, then failed the try."""
    import threading

    emulator, ti, returned = aws_default_connection, Ti(), []
    op = multi_node()
    running = threading.Thread(target=lambda: returned.append(op.execute({"ti": ti, "task_state_store": Store()})))
    running.start()
    first = lose_node_1_when_it_runs(emulator)
    running.join(120)
    assert not running.is_alive() and returned == [{"loss": 0.25}]
    assert_node_loss_resubmitted(emulator, ti, first)
