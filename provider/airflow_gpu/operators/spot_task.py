"""Where a ``SpotRun`` meets Airflow: XCom for the readers, the right exception for a failure.

The run itself (``airflow_gpu.spot.run``) is pure; these few lines are the Airflow side every GPU
operator shares, so that ``gpu_interruptions`` and ``gpu_accelerator`` have the same keys and a
failure is retried by Airflow (or not) the same way whichever backend ran it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_gpu.utils import task_state
from airflow_gpu.utils.results import ACCELERATOR_XCOM_KEY, INTERRUPTIONS_XCOM_KEY, ResultError

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.spot.policy import Decision
    from airflow_gpu.spot.run import SpotRun


def publish(context: Context, run: SpotRun, location: str | None = None) -> None:
    """The interruptions so far and where the workload ran, for downstream tasks and dashboards."""
    ti = context["ti"]
    ti.xcom_push(key=INTERRUPTIONS_XCOM_KEY, value=list(run.interruptions))
    ti.xcom_push(key=ACCELERATOR_XCOM_KEY, value=run.summary(location))


def fail(run: SpotRun, decision: Decision, detail: str = "", cause: BaseException | None = None) -> NoReturn:
    """Raise the decision's failure: retryable by Airflow, or not (a bug, by default)."""
    message = run.failure_message(decision, detail)
    if decision.retry_allowed:
        raise AirflowException(message) from cause
    raise AirflowFailException(message) from cause


def bad_result(error: ResultError) -> AirflowFailException:
    """A result line that is not JSON is a bug in the workload: running it again will not fix it."""
    return AirflowFailException(str(error))


def save_run(context: Context, key: str, run: SpotRun, open_: bool = True) -> None:
    """The run's state in the task state store (Airflow 3.3+), before any waiting.

    ``open_`` stays True while the try is under way; it turns False once the try has decided its
    end, so that a later try (Airflow's retry after a failure) never takes over a job that an
    earlier try already judged. Only a try whose process died leaves it open.
    """
    if not task_state.write(context, key, {"open": open_, "run": run.to_json()}):
        logging.getLogger(__name__).warning(
            "No task state store (it needs Airflow 3.3): a retry after a worker crash cannot find %s %s, "
            "and will submit another while it runs on", run.backend, run.workload,
        )  # fmt: skip


def saved_run(context: Context, key: str, open_only: bool = False) -> dict[str, Any] | None:
    """The run state ``save_run`` recorded, if any (and still open, with ``open_only``)."""
    saved = task_state.read(context, key)
    if isinstance(saved, dict) and "run" not in saved and saved.get("job_id"):  # before the shared core
        saved = {"open": True, "run": saved}
    if not isinstance(saved, dict) or (open_only and not saved.get("open")):
        return None
    run = saved.get("run")
    return dict(run) if isinstance(run, dict) else None
