"""Where the GPU profile meets the operators: wrapping the command, and the XCom ``gpu_profile``.

Both GPU operators profile the same way. The workload's command runs under the profiling
entrypoint (``airflow_gpu.profiling.bundle``), which needs nothing from the image but a python3;
what it prints at exit is read back with the result line (``utils.results.read_output``), turned
into the document the report pages show (``profiling.report``), and pushed to XCom for every pod
or job that ended, so that a preempted or failed one leaves its profile too (the last one wins).
Beside it goes ``gpu_profile_summary`` (``plugins.document.profile_summary``, under 1 KB): what the
run page shows of the instance, so that a run of 1,000 mapped instances is drawn without reading
their documents. A profile that cannot be had is a log line and an empty document, never a failed task.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from airflow_gpu.utils.results import PROFILE_XCOM_KEY, WorkloadOutput

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.accelerators.spec import Accelerator
    from airflow_gpu.profiling.report import Backend
    from airflow_gpu.spot.run import SpotRun

ENV_PROFILE_INTERVAL = "AIRFLOW_GPU_PROFILE_INTERVAL"
ENV_IMDS = "AIRFLOW_GPU_IMDS"
#: Where the workload finds the spot notice (Kubernetes' ``preStop`` hook or the profiler's IMDS poll).
ENV_SPOT_NOTICE = "AIRFLOW_GPU_SPOT_NOTICE_FILE"


def profiled_by_default(candidates: Sequence[Accelerator]) -> bool:
    """NVIDIA GPUs are profiled unless asked otherwise; other accelerators have no NVML to read."""
    return all(c.vendor == "nvidia" and c.catalog_entry.kind == "gpu" for c in candidates)


def check_interval(interval: float) -> float:
    """The sampling interval, refused at DAG parse time when it cannot work."""
    from airflow_gpu.accelerators.errors import AcceleratorSpecError

    if not 0.05 <= float(interval) <= 60:
        raise AcceleratorSpecError(
            "profile_interval", interval, "outside the sampling interval range", ["0.05 to 60 seconds"]
        )
    return float(interval)


def profiler_environment(interval: float, capacity: str | None) -> dict[str, str]:
    """What the profiler reads: the interval, and no spot-notice polling where no spot can be reclaimed."""
    env = {ENV_PROFILE_INTERVAL: str(interval)}
    if capacity == "on-demand":  # nothing to be told two minutes early; off EC2 the poll only times out
        env[ENV_IMDS] = "off"
    return env


def wrapped(command: Sequence[str], interval: float) -> list[str]:
    """``command`` run under the profiling entrypoint."""
    from airflow_gpu.profiling.bundle import wrap

    return wrap(list(command), interval=interval)


def publish_profile(
    context: Context,
    output: WorkloadOutput | None,
    *,
    run: SpotRun | None,
    accelerator: Accelerator,
    workload: str | None,
    instance_type: str | None,
    log: logging.Logger | Any,
    capacity: str | None = None,
    unread: str | None = None,
    backend: str | None = None,
) -> dict[str, Any] | None:
    """Build XCom ``gpu_profile`` for the workload that just ended, say in the task log what it shows.

    ``output`` is None when the log could not be read; ``unread`` then says why. ``capacity`` is the
    capacity the workload got, where the backend tells (else the run's placement says it). Without
    a spot ``run`` (the worker itself), ``backend`` names where it ran.
    """
    from airflow_gpu.profiling.report import build_profile

    warning = unread
    if output is not None and output.profile_warning:
        warning = f"the GPU profile the workload printed was not taken: {output.profile_warning}"
    elif output is not None and not output.profile_printed:
        warning = "the workload printed no GPU profile (no python3 in the image, or it was killed before it could)"
    if warning:
        log.warning("GPU profile of %s: %s", workload, warning)
    try:  # never the task's outcome: a profile that cannot be built or stored is a log line
        document = build_profile(
            output.profile if output is not None else None,
            accelerator=accelerator,
            capacity=capacity or (run.capacity if run is not None else None),
            backend=cast("Backend", backend or (run.backend if run is not None else "local")),
            workload=workload,
            instance_type=instance_type,
            interruptions=len(run.interruptions) if run is not None else 0,
            warning=warning,
        )
        context["ti"].xcom_push(key=PROFILE_XCOM_KEY, value=document)
    except Exception as error:
        log.warning("GPU profile of %s was not stored: %s: %s", workload, type(error).__name__, error)
        return None
    _push_summary(context, document, workload, log)
    log.info("GPU profile of %s: %s", workload, headline(document))
    return document


def _push_summary(context: Context, document: dict[str, Any], workload: str | None, log: Any) -> None:
    """XCom ``gpu_profile_summary`` beside the document; without it the run page reads the whole document."""
    from airflow_gpu.plugins.document import SUMMARY_KEY, profile_summary

    try:
        context["ti"].xcom_push(key=SUMMARY_KEY, value=profile_summary(document))
    except Exception as error:
        log.warning(
            "GPU profile summary of %s was not stored (the run page reads the whole profile instead): %s: %s",
            workload,
            type(error).__name__,
            error,
        )


def headline(document: dict[str, Any]) -> str:
    """One line for the task log: what the GPUs did and what it cost."""
    if document.get("empty"):
        return f"no samples ({document.get('note') or 'no GPU was visible'})"
    parts = [f"{len(document.get('gpus') or [])} GPU(s) on {document.get('source')}"]
    if document.get("util_mean") is not None:
        parts.append(f"mean utilisation {document['util_mean']:.0f}%")
    parts.append(f"{document.get('gpu_hours', 0):.3f} GPU-hours")
    if document.get("energy_wh") is not None:
        parts.append(f"{document['energy_wh']:.1f} Wh")
    cost = document.get("cost")
    if cost:
        parts.append(f"about ${cost['usd']:.2f} ({cost['basis']}, prices of {cost['prices_date']})")
    advice = document.get("advice") or []
    if advice:
        parts.append("advice: " + "; ".join(str(a["message"]) for a in advice))
    return ", ".join(parts)
