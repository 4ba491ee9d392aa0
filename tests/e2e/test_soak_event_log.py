"""The soak's judge reads Airflow's stuck-in-queued events through REST API v2 (``runner.stuck_events``): its query
must be one the shared stack's real API server answers, and pick exactly one try's stuck events and its ``running``
ones (Airflow counts the requeues from the last). The rows are written into the stack's PostgreSQL as the scheduler
writes them (``SchedulerJobRunner._maybe_requeue_stuck_ti`` adds ``Log`` rows with the task instance's key): making
a real scheduler fail a task that way takes three ``task_queued_timeout`` periods."""

from __future__ import annotations

import contextlib
import datetime
import uuid

import psycopg2
import pytest
from sqlalchemy.engine import make_url

from airflow_gpu.testing.airflow_stack import AirflowStack
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.soak import invariants
from airflow_gpu.testing.soak.runner import stuck_events

pytestmark = pytest.mark.slow  # the shared Airflow stack
DAG_ID = "gpu_profile_hostile"


def test_stuck_events_are_one_try_s_runs_requeues_and_failure_oldest_first(
    airflow_stack: tuple[AirflowStack, KubernetesEmulator], stack_database: str
) -> None:
    stack = airflow_stack[0]
    run_id = f"manual__stuck-{uuid.uuid4().hex[:8]}"
    base = datetime.datetime(2026, 11, 27, 14, 27, 32, tzinfo=datetime.UTC)
    rows = [  # (seconds after base, task, map index, try, event)
        (75, "profiled", -1, 2, invariants.STUCK_REQUEUED),
        (0, "profiled", -1, 2, invariants.STUCK_REQUEUED),
        (151, "profiled", -1, 2, invariants.STUCK_FAILED),
        (-30, "profiled", -1, 2, invariants.RUNNING),  # from its last one Airflow counts the requeues
        (-20, "profiled", -1, 2, "success"),  # another event of the same try
        (10, "profiled", -1, 1, invariants.STUCK_REQUEUED),  # another try
        (20, "profiled", 0, 2, invariants.STUCK_FAILED),  # another map index
        (30, "other", -1, 2, invariants.STUCK_FAILED),  # another task
    ]
    url = make_url(stack_database)
    with (
        contextlib.closing(
            psycopg2.connect(host=url.host, port=url.port, user=url.username, dbname=url.database)
        ) as connection,
        connection,
        connection.cursor() as cursor,
    ):
        cursor.executemany(
            "INSERT INTO log (dttm, dag_id, task_id, map_index, event, run_id, try_number, extra)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (base + datetime.timedelta(seconds=at), DAG_ID, task, index, event, run_id, try_number, "soak")
                for at, task, index, try_number, event in rows
            ],
        )

    events = stuck_events(stack, (DAG_ID, "profiled", run_id, -1), 2)

    start = base.timestamp()
    assert events == [
        (start - 30, invariants.RUNNING),
        (start, invariants.STUCK_REQUEUED),
        (start + 75, invariants.STUCK_REQUEUED),
        (start + 151, invariants.STUCK_FAILED),
    ]
