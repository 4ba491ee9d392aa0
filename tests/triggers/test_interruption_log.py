"""``log_interruptions``: the task log's account of an ended workload, from a worker or a trigger."""

from __future__ import annotations

import logging

import pytest

from airflow_gpu.spot.classifier import Classification, Outcome
from airflow_gpu.spot.policy import SpotPolicy
from airflow_gpu.spot.run import SpotRun
from airflow_gpu.triggers.interruption_log import log_interruptions

RECLAIM = Classification(Outcome.PREEMPTED, "SpotReclaim", "Host EC2 (instance i-1) terminated.", 143, True)


def test_each_interruption_of_one_end_gets_its_own_number_in_the_run(caplog: pytest.LogCaptureFixture) -> None:
    """Batch retried one reclaim itself and the second ended the job: two interruptions recorded at
    once, numbered 1 and 2; the next job's reclaim is number 3."""
    run = SpotRun.start(SpotPolicy(max_interruptions=3), ["A10G:1"], "batch", "spot")
    log = logging.getLogger("tests.interruption_log")
    with caplog.at_level(logging.WARNING, logger=log.name):
        log_interruptions(log, run, run.finish(RECLAIM, [RECLAIM, RECLAIM], workload="job-1"), "job-1")
        log_interruptions(log, run, run.finish(RECLAIM, [RECLAIM], workload="job-2"), "job-2")
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(":")[0] for line in lines if line.startswith("GPU interruption")] == [
        "GPU interruption 1", "GPU interruption 2", "GPU interruption 3",
    ]  # fmt: skip
    assert lines[0] == (
        "GPU interruption 1: preempted (SpotReclaim) on job-1: the platform ran the workload again (retryStrategy)"
    )
    assert lines[2].startswith("The job job-1 ended: preempted (SpotReclaim); resubmitting, interruption 2 of 3")


def test_a_trigger_names_its_workload(caplog: pytest.LogCaptureFixture) -> None:
    run = SpotRun.start(SpotPolicy(max_interruptions=1), ["H100:8"], "kubernetes", "spot")
    log = logging.getLogger("tests.interruption_log")
    with caplog.at_level(logging.WARNING, logger=log.name):
        log_interruptions(log, run, run.finish(RECLAIM, workload="train-abc"), "train-abc", noun="training Job")
    assert caplog.records[-1].getMessage().startswith("The training Job train-abc ended: preempted")
