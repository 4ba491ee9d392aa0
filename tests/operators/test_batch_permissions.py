"""docs/permissions/aws-batch-policy.json against the AWS calls the provider really makes.

Every botocore call the provider's code (and the Amazon provider's, which ``GPUBatchOperator`` and its
hook inherit) sends while GPU tasks run against the AWS Batch emulator is recorded by a ``before-call``
event handler on every client botocore and aiobotocore create: sync and deferred runs, a spot reclaim
the trigger resubmits on demand, a capacity cancel, a kill, an orphaned try's job taken over or cancelled, the
reaper, and the ECR credentials for an
image's ENTRYPOINT. Calls made by the tests themselves (their emulator clients) are not the provider's
and are left out by where they come from. Each recorded call must be allowed by the policy (a call it
misses fails in production), and the policy must grant nothing that no code calls, but for the
actions behind a call that botocore does not make (named below, with why).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore import xform_name

from airflow_gpu.testing.batch.emulator import BatchEmulator
from tests.operators.conftest import LOG_INGESTION_DELAY

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_backoff")]

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "docs" / "permissions" / "aws-batch-policy.json"
#: Whose calls count: the provider's code and the Amazon provider's, not the tests' or the emulators'.
CODE = (str(REPO / "provider" / "airflow_gpu") + "/", "/airflow/providers/amazon/")
NOT_CODE = (str(REPO / "provider" / "airflow_gpu" / "testing") + "/",)
#: Granted without a botocore call of that name, and why.
NOT_BOTOCORE = {
    # SubmitJob and RegisterJobDefinition carry tags (the task try's identity, what the reaper and a
    # retry find jobs by); AWS Batch authorizes tags given on create as batch:TagResource as well (a retry that
    # takes over a running job calls TagResource too: orphaned_try.mark_job_taken, run below).
    "batch:TagResource",
    # hooks/registry.py reads an ECR image's config over the registry API (HTTP, not botocore) with
    # the GetAuthorizationToken token: the registry authorizes these two actions.
    "ecr:BatchGetImage",
    "ecr:GetDownloadUrlForLayer",
}


def policy_actions() -> set[str]:
    document = json.loads(POLICY.read_text())
    actions: set[str] = set()
    for statement in document["Statement"]:
        assert statement["Effect"] == "Allow"
        listed = statement["Action"]
        actions |= {listed} if isinstance(listed, str) else set(listed)
    return actions


@contextmanager
def recorded_calls() -> Iterator[set[str]]:
    """``service:Operation`` (the IAM action's form) of every call the provider's code makes meanwhile."""
    calls: set[str] = set()

    def record(model: Any, **_: Any) -> None:
        frames = [f.f_code.co_filename for f in _stack()]
        if any(f.startswith(CODE) or CODE[1] in f for f in frames if not f.startswith(NOT_CODE)):
            calls.add(f"{model.service_model.signing_name}:{model.name}")

    original = botocore.session.Session._register_client_plugins

    def register(self: Any, client: Any) -> None:
        original(self, client)
        client.meta.events.register("before-call", record)

    botocore.session.Session._register_client_plugins = register  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        botocore.session.Session._register_client_plugins = original  # type: ignore[method-assign]


def _stack() -> Iterator[Any]:
    frame = sys._getframe(1)
    while frame is not None:
        yield frame
        frame = frame.f_back  # type: ignore[assignment]


@contextmanager
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[BatchEmulator]:
    with BatchEmulator(stop_timeout=5, log_ingestion_delay=LOG_INGESTION_DELAY) as running:
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", running.airflow_connection_uri())
        yield running


def test_the_policy_allows_every_call_the_provider_makes_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.operators import test_batch_operator_deferred as deferred_runs
    from tests.operators import test_batch_operator_runs as runs
    from tests.operators import test_batch_operator_transient as transient
    from tests.operators.task_context import Store, Ti

    with recorded_calls() as calls:
        with emulator(monkeypatch):  # a sync run with its result read from CloudWatch Logs
            assert runs.operator().execute({"ti": Ti(), "task_state_store": Store()}) == {"loss": 0.25}
        with emulator(monkeypatch) as batch:  # spot without capacity: cancelled, then on-demand
            batch.stall("gpu-spot-ce")
            assert runs.operator().execute({"ti": Ti(), "task_state_store": Store()})
        with emulator(monkeypatch) as batch:  # deferred; the trigger resubmits a reclaimed job on demand
            context, gate = {"ti": Ti(), "task_state_store": Store()}, tmp_path / "gate"
            waiting = deferred_runs.defer(context, command=deferred_runs.gated_result(gate))
            reclaimer = deferred_runs.reclaim_when_running(batch, "train", after_line="checkpoint 1", then_open=gate)
            event = asyncio.run(deferred_runs.first_event(deferred_runs.trigger_of(waiting)))
            reclaimer.finished()
            assert deferred_runs.resume(waiting, event, context, command=deferred_runs.gated_result(gate)) == {
                "loss": 0.25
            }
        with emulator(monkeypatch) as batch:  # a deferral past execution_timeout terminates its job
            runs.test_a_deferral_past_execution_timeout_terminates_its_job_and_closes_the_try(batch)
        with emulator(monkeypatch):  # an ECR registry's challenge: credentials from the task's AWS connection
            from airflow_gpu.hooks.batch import GPUBatchHook
            from airflow_gpu.hooks.registry import ecr_credentials

            ecr = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
            assert ecr_credentials(GPUBatchHook(aws_conn_id="aws_default"))(ecr).startswith("Basic ")
        with emulator(monkeypatch) as batch:  # an orphaned try: its retry tags the job it takes over
            transient.test_an_orphan_leaves_its_job_to_the_retry_that_tags_it_taken_over(batch, tmp_path, monkeypatch)
        with emulator(monkeypatch) as batch:  # an orphaned try whose retry never came: its job cancelled
            transient.test_an_orphan_cancels_the_job_left_for_a_retry_that_never_came_if_it_never_started(
                batch, monkeypatch
            )
        with emulator(monkeypatch) as batch:  # the reaper lists the queues' jobs
            from airflow_gpu.reap.batch import BatchResources
            from airflow_gpu.reap.reaper import reap
            from tests.reap.conftest import RecordedAirflow

            sources = [BatchResources(batch.client("batch"), ["gpu-spot", "gpu-on-demand"])]
            assert reap(sources, RecordedAirflow({}), grace=timedelta(0)).orphans == []
    granted = policy_actions()
    assert calls <= granted, f"called, not in {POLICY.name}: {sorted(calls - granted)}"
    assert granted - calls <= NOT_BOTOCORE, f"granted, never called: {sorted(granted - calls - NOT_BOTOCORE)}"
    assert granted >= NOT_BOTOCORE


def test_every_action_of_the_policy_is_an_operation_of_its_service() -> None:
    """A misspelt action grants nothing, silently: each must be one of botocore's operations."""
    session = botocore.session.get_session()
    for action in policy_actions():
        service, _, operation = action.partition(":")
        assert operation in session.get_service_model(service).operation_names, action


def test_every_aws_operation_the_provider_names_is_in_the_policy() -> None:
    """The paths the runs above do not take (a lost SubmitJob's ListJobs look-up, the reaper's kills, a retry's
    take-over tag) are covered too: each botocore operation the provider's code names as a client method is
    granted. A method name several of the services share (``tag_resource``) is granted for one of them at least:
    the scan cannot tell whose client calls it."""
    session = botocore.session.get_session()
    code = "\n".join(
        p.read_text() for p in (REPO / "provider" / "airflow_gpu").rglob("*.py") if "testing" not in p.parts
    )
    actions_of: dict[str, set[str]] = {}
    for service in ("batch", "logs", "ecr"):
        model = session.get_service_model(service)
        for operation in model.operation_names:
            actions_of.setdefault(xform_name(operation), set()).add(f"{model.signing_name}:{operation}")
    named = {method: actions for method, actions in actions_of.items() if re.search(rf"[.\"']{method}\b", code)}
    assert {"batch:SubmitJob"} in named.values() and {"logs:GetLogEvents"} in named.values()  # the scan works
    assert "tag_resource" in named  # and finds a shared name
    ungranted = sorted(method for method, actions in named.items() if not actions & policy_actions())
    assert not ungranted, ungranted
