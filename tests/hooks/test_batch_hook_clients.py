"""How ``GPUBatchHook`` makes its boto3 clients: one session per region for all of them, made one at a
time, and its caller named in the user agent (``Caller/<class>``) as the amazon provider's hook names it,
without ``inspect.stack()`` (the answers are compared with the amazon hook's own finders, called from the
same frames). Clients are made, never called: nothing here reaches an endpoint."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from airflow.providers.amazon.aws.hooks.base_aws import AwsGenericHook, SessionFactory

from airflow_gpu.hooks.batch import GPUBatchHook


def both(target: str = "execute") -> tuple[Any, Any]:
    """The amazon hook's answer and ours, from the caller's frames."""
    return AwsGenericHook._find_operator_class_name(target), GPUBatchHook._find_operator_class_name(target)


class TrainOperator:
    def execute(self, context: Any = None) -> tuple[Any, Any]:
        return self.nested()

    def nested(self) -> tuple[Any, Any]:
        return both()


class PokingSensor:
    def poke(self, context: Any = None) -> tuple[Any, Any]:
        return both("poke")


class BaseSensorOperator:
    """Named as Airflow's: ``_get_caller`` looks for ``poke`` when ``execute`` is the base sensor's."""

    def execute(self) -> str:
        return PokingSensorUnderBase().poke()


class PokingSensorUnderBase:
    def poke(self) -> str:
        hook = GPUBatchHook.__new__(GPUBatchHook)  # no connection: _get_caller reads none
        return str(hook._get_caller())


def execute() -> tuple[Any, Any]:
    """A function named ``execute`` has no ``self``: both raise, which ``_get_caller`` makes "Unknown"."""
    answers = []
    for finder in (AwsGenericHook._find_operator_class_name, GPUBatchHook._find_operator_class_name):
        try:
            answers.append(finder("execute"))
        except KeyError:
            answers.append("raised")
    return answers[0], answers[1]


def test_the_innermost_execute_frames_class_is_named_as_the_amazon_hook_names_it() -> None:
    theirs, ours = TrainOperator().execute()
    assert theirs == ours == "TrainOperator"


def test_a_sensor_is_named_by_its_poke() -> None:
    theirs, ours = PokingSensor().poke()
    assert theirs == ours == "PokingSensor"
    assert BaseSensorOperator().execute() == "PokingSensorUnderBase"


def test_no_execute_frame_is_none_and_one_without_self_raises_as_before() -> None:
    assert both() == (None, None)
    assert execute() == ("raised", "raised")


def test_an_execute_without_self_makes_the_caller_unknown() -> None:
    def execute() -> str:  # ``_get_caller`` turns the raise into "Unknown", as the amazon hook's does
        return str(GPUBatchHook.__new__(GPUBatchHook)._get_caller())

    assert execute() == "Unknown"


class LocalExecutor:
    """A frame whose module names ``BaseExecutor`` (as an executor's module imports it)."""


def test_without_an_operator_the_executor_class_is_found_as_before() -> None:
    namespace: dict[str, Any] = {"BaseExecutor": type("BaseExecutor", (), {}), "LocalExecutor": LocalExecutor}
    code = "def run(amazon, ours):\n    return amazon(), ours()\n"
    exec(compile(code, "<executor>", "exec"), namespace)
    theirs, ours = namespace["run"](AwsGenericHook._find_executor_class_name, GPUBatchHook._find_executor_class_name)
    assert theirs == ours == "LocalExecutor"
    assert AwsGenericHook._find_executor_class_name() == GPUBatchHook._find_executor_class_name() is None


def test_no_frame_source_is_read(monkeypatch: Any) -> None:
    """The point of the override: ``inspect.stack()`` (every frame's source lines, and a walk of
    ``sys.modules`` for a frame without a file) is never called."""
    import inspect

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("inspect.stack() called")

    monkeypatch.setattr(inspect, "stack", refuse)

    class Operator:
        def execute(self) -> str:
            return str(GPUBatchHook.__new__(GPUBatchHook)._get_caller())

    assert Operator().execute() == "Operator"


@pytest.fixture
def sessions_made(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The region of every boto3 session the amazon hook's factory makes, through ``aws_default``."""
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", "aws://key:secret@/?region_name=eu-west-1")
    made: list[str | None] = []
    create = SessionFactory.create_session

    def counted(factory: SessionFactory, deferrable: bool = False) -> Any:
        made.append(factory.region_name)
        return create(factory, deferrable=deferrable)

    monkeypatch.setattr(SessionFactory, "create_session", counted)
    return made


def logs_in(region: str | None) -> dict[str, Any]:
    """A job description whose awslogs write to ``region`` (none: the connection's)."""
    options = {"awslogs-region": region} if region else {}
    return {"container": {"logConfiguration": {"logDriver": "awslogs", "options": options}}}


def test_a_tasks_clients_share_one_session_per_region(sessions_made: list[str | None]) -> None:
    hook = GPUBatchHook(aws_conn_id="aws_default")
    batch, submit, logs = hook.api, hook._submit_api, hook.logs_client(logs_in(None))
    assert len(sessions_made) == 1  # the Batch client, SubmitJob's and the connection region's logs
    assert batch._request_signer._credentials is submit._request_signer._credentials
    assert logs.meta.region_name == batch.meta.region_name == "eu-west-1"
    other = hook.logs_client(logs_in("us-west-2"))
    assert other.meta.region_name == "us-west-2" and sessions_made == ["eu-west-1", "us-west-2"]
    assert GPUBatchHook(aws_conn_id="aws_default").api is not batch and len(sessions_made) == 3  # a new hook: anew


def test_clients_made_from_many_threads_at_once_are_all_made(sessions_made: list[str | None]) -> None:
    """A trigger's threads share its hook; a boto3 session makes one client at a time."""
    hook = GPUBatchHook(aws_conn_id="aws_default")
    made: list[Any] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def make(region: str) -> None:
        start.wait()
        try:
            made.append(hook.logs_client(logs_in(region)))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=make, args=(("eu-west-1", "us-east-2")[i % 2],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and len(made) == 8
    assert sorted(sessions_made, key=str) == ["eu-west-1", "us-east-2"]


def test_a_role_arn_connection_assumes_its_role_once_for_all_of_a_tasks_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``role_arn`` each boto3 session of the amazon hook calls STS ``AssumeRole`` for its credentials
    (``SessionFactory._refresh_credentials``): one session for the Batch client, SubmitJob's and the logs
    client means one call where a session per client made three. Counted where the calls arrive: the Batch
    emulator's moto server, which serves STS too, keeps every role it was asked to assume."""
    import json

    from moto.sts.models import sts_backends

    from airflow_gpu.testing.batch.emulator import BatchEmulator

    role = "arn:aws:iam::123456789012:role/airflow-gpu-batch"
    with BatchEmulator(stop_timeout=5) as emulator:
        connection = emulator.airflow_connection()
        connection["extra"] |= {"role_arn": role, "service_config": {"sts": {"endpoint_url": emulator.endpoint_url}}}
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(connection))
        assumed = sts_backends["123456789012"]["aws"].assumed_roles
        before = len(assumed)
        hook = GPUBatchHook(aws_conn_id="aws_default")
        assert hook.api.describe_jobs(jobs=[])["jobs"] == []
        assert hook._submit_api.list_jobs(jobQueue="gpu-spot")["jobSummaryList"] == []
        hook.logs_client(logs_in(None)).describe_log_groups(limit=1)
        assert [r.role_arn for r in assumed[before:]] == [role]  # the three clients' calls: one AssumeRole
        hook.logs_client(logs_in("us-west-2"))  # another region: another session, its own credentials
        assert [r.role_arn for r in assumed[before:]] == [role, role]


def test_a_connection_without_a_region_takes_boto3_s_default_region(monkeypatch: pytest.MonkeyPatch) -> None:
    """No region on the hook or the connection (an EKS pod's ``AWS_DEFAULT_REGION``, or ``~/.aws/config``): the
    session is boto3's default one, and the logs client of the connection's region shares it. Keying the
    sessions by the connection's resolved region asked the Batch client being made for its region: a
    ``RecursionError``."""
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", "aws://key:secret@")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    hook = GPUBatchHook(aws_conn_id="aws_default")
    assert hook.region_name is None
    batch, logs = hook.api, hook.logs_client(logs_in(None))
    assert batch.meta.region_name == logs.meta.region_name == "ap-south-1"
    assert batch._request_signer._credentials is logs._request_signer._credentials  # one session
