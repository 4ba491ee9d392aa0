"""The XCom ``gpu_profile`` document: the container's profile payload, plus what it adds up to.

Built on the worker from the payload the job printed (or None when it printed none, or a broken
one), the accelerator the task asked for and what the operator knows about where it ran. The
document is what the report pages read: it must stay JSON and small (it lives in the Airflow
database as XCom), so it carries the payload's already-bounded series and a few derived figures:
duration, GPU-hours, energy, mean utilisation, an estimated cost with the sentence that says how
it was worked out (and the date and source of the price), and the advice.

The payload comes from the workload's log, so it is cleaned before anything adds it up
(``payload.clean``): what was malformed is left out, listed in ``malformed`` and said in ``note``,
and no number in the document is non-finite. The cost covers the sampled GPU time only, at the
price data's region (us-east-1); it is estimated on a guessed instance type only for AWS Batch,
which always runs on AWS, never for a Kubernetes node whose instance type is unknown.

A MIG slice's power and energy are its whole GPU's (NVML measures no slice; the summary's
``energy_scope`` is ``"gpu"``): they stay in its summary, so marked, but never count as the task's
energy; ``energy_note`` says so. Scaling them to the slice would need a basis NVIDIA does not give
(a slice's share of compute is not its share of power).

Pure: no Airflow and no cloud SDK, so that it is tested with plain dicts.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from airflow_gpu.accelerators import catalog
from airflow_gpu.accelerators.catalog import AcceleratorType, InstanceType
from airflow_gpu.accelerators.spec import Accelerator
from airflow_gpu.profiling import prices
from airflow_gpu.profiling.advice import advise
from airflow_gpu.profiling.payload import clean as clean_payload
from airflow_gpu.profiling.payload import finite, finite_number

Backend = Literal["kubernetes", "batch", "local"]
VERSION = 1

#: The payload's fields, as a document without a profile holds them (so pages need no special case).
EMPTY_PAYLOAD: dict[str, Any] = {
    "v": VERSION,
    "source": "none",
    "note": None,
    "interval": None,
    "started": None,
    "ended": None,
    "exit_code": None,
    "signals": [],
    "spot_notice": None,
    "driver": None,
    "cuda": None,
    "gpus": [],
    "topology": None,
    "summary": [],
    "samples_taken": 0,
    "series": [],
    "series_points": 0,
}
NO_PROFILE = "the job printed no GPU profile"
NO_SAMPLES = "no GPU samples were taken"
MALFORMED_SUMMARIES = "the profile's GPU summaries were malformed, so nothing was measured"
NOT_AN_OBJECT = "the GPU profile the workload printed is not a JSON object"
#: Why a task on Kubernetes without its node's instance type has no cost.
NO_INSTANCE_TYPE = (
    "the node's instance type was not known (no permission to read nodes, or not an AWS node: GKE, AKS or "
    "on-premises), so there is no price to apply"
)
#: Why a MIG slice's energy is not in the task's: NVML reports power and energy for the whole GPU.
PARENT_ENERGY = (
    "{which}: a MIG slice, whose power and energy NVML reports for the whole GPU it is part of (shared with the "
    "GPU's other slices), not for the slice; the whole GPU's figures are not counted as this task's energy"
)
#: The ``malformed`` list names at most this many problems (and how many more there were).
MAX_REPORTED = 10

_CAPACITIES: dict[str, prices.Capacity] = {
    "spot": "spot",
    "on-demand": "on-demand",
    "on_demand": "on-demand",
    "ondemand": "on-demand",
}


def _measured(summaries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [s for s in summaries if (finite_number(s.get("samples")) or 0) > 0]


def find_instance(name: str) -> tuple[AcceleratorType, InstanceType] | None:
    """The catalog's instance type called ``name``, with the accelerator it carries."""
    for entry in catalog.CATALOG:
        for instance in entry.instance_types:
            if instance.name == name:
                return entry, instance
    return None


def devices_needed(accelerator: Accelerator) -> int:
    """Whole devices the request occupies; MIG slices of one profile share the fewest GPUs that hold them."""
    profile = accelerator.mig_profile
    if profile is None:
        return accelerator.count
    return max(1, math.ceil(accelerator.count * profile.compute_slices / 7))


def smallest_instance(accelerator: Accelerator) -> InstanceType | None:
    """The catalog's smallest AWS instance type carrying the devices ``accelerator`` asks for.

    Smallest is fewest accelerators, then fewest vCPUs and least memory; between equals, one with a
    price in the data wins (p5en.48xlarge over p5e.48xlarge, which AWS does not sell on demand).
    """
    table = prices.load()
    sizes = {v.memory_gb for v in accelerator.variants}
    needed = devices_needed(accelerator)
    fitting = [i for i in accelerator.catalog_entry.instance_types if i.accelerators >= needed and i.memory_gb in sizes]
    if not fitting:
        return None
    return min(
        fitting,
        key=lambda i: (i.accelerators, i.vcpus, i.memory_gib, table.price(i.name, "on-demand") is None, i.name),
    )


def estimate_cost(
    accelerator: Accelerator,
    summaries: Sequence[Mapping[str, Any]],
    *,
    backend: str,
    instance_type: str | None,
    capacity: str | None,
) -> tuple[prices.Cost | None, str | None]:
    """The cost of the measured GPU time, or None and the reason there is none.

    Without the instance type, only an AWS Batch task is priced (Batch runs on AWS, so the
    catalog's smallest AWS instance carrying the request is a fair guess, and the basis says it
    is one); a Kubernetes node without one may be anywhere (GKE, AKS, on-premises), and pricing
    it as AWS would be a number with nothing behind it.
    """
    measured = _measured(summaries)
    if not measured:
        return None, "no GPU time was measured, so there is nothing to price"
    chosen = _CAPACITIES.get((capacity or "").strip().lower())
    capacity_note = "" if chosen else " (the capacity was not reported: priced on demand)"
    chosen = chosen or "on-demand"
    estimated = None
    if instance_type:
        found = find_instance(instance_type)
        if found is None:
            return None, (
                f"{instance_type} is not an AWS instance type of the catalog (the price data covers AWS only), so "
                "its GPU count and price are unknown"
            )
        instance = found[1]
    elif backend != "batch":
        return None, NO_INSTANCE_TYPE
    else:
        guess = smallest_instance(accelerator)
        if guess is None:
            return None, f"the catalog knows no AWS instance type carrying {accelerator}, and none was reported"
        instance = guess
        estimated = (
            f"AWS Batch did not report the instance type it chose: estimated as {instance.name}, the catalog's "
            f"smallest AWS instance with {devices_needed(accelerator)} {accelerator.type}"
        )
    table = prices.load()
    price = table.price(instance.name, chosen)
    if price is None:
        other = table.price(instance.name, "on-demand" if chosen == "spot" else "spot")
        hint = f"; its {other.capacity} price was ${other.usd_per_hour:g}/h on {other.date}" if other else ""
        return None, f"the price data has no {chosen} price for {instance.name} in {table.region}{hint}"
    device_hours = sum(finite_number(s.get("seconds")) or 0.0 for s in measured) / 3600
    profile = accelerator.mig_profile
    if profile is None and len(measured) > instance.accelerators:
        return None, f"{len(measured)} GPUs were measured but {instance.name} carries {instance.accelerators}"
    share = profile.compute_slices / 7 if profile is not None else 1.0
    held = None
    if profile is not None:
        held = (
            f"{len(measured)} MIG {profile.name} slice{'s' if len(measured) > 1 else ''} "
            f"({profile.compute_slices}/7 of a GPU each)"
        )
    cost = prices.gpu_cost(
        price,
        region=table.region,
        instance_gpus=instance.accelerators,
        gpus=len(measured) * share,
        gpu_hours=device_hours * share,
        held=held,
        estimated=estimated,
    )
    if not math.isfinite(cost.usd):
        return None, "the measured GPU time is too large to price"
    if capacity_note:
        cost = prices.Cost(**{**cost.to_json(), "basis": cost.basis + capacity_note})
    return cost, None


def whole_gpu(summary: Mapping[str, Any]) -> bool:
    """Whether a summary's power and energy are the whole GPU's, the task having held a MIG slice of it."""
    return summary.get("energy_scope") == "gpu"


def _energy(measured: Sequence[Mapping[str, Any]]) -> tuple[float | None, str | None]:
    """The task's energy in Wh (its own GPUs' only), and the note on the MIG slices left out."""
    own = [e for s in measured if not whole_gpu(s) and (e := finite_number(s.get("energy_wh"))) is not None]
    shared = [s for s in measured if whole_gpu(s)]
    which = ", ".join(f"GPU {s.get('gpu')}" for s in shared)
    return (round(sum(own), 3) if own else None), (PARENT_ENERGY.format(which=which) if shared else None)


def _duration(document: Mapping[str, Any], problems: list[str]) -> float | None:
    started, ended = finite_number(document.get("started")), finite_number(document.get("ended"))
    if started is None or ended is None:
        return None
    if ended < started:
        problems.append("ended: before started, so there is no duration")
        return None
    return round(ended - started, 3)


def _malformed_note(problems: Sequence[str]) -> str:
    shown = "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else "")
    count = len(problems)
    return f"{count} malformed part{'s' if count > 1 else ''} of the profile left out ({shown})"


def build_profile(
    payload: Mapping[str, Any] | None,
    *,
    accelerator: Accelerator | str,
    capacity: str | None,
    backend: Backend,
    workload: str | None,
    instance_type: str | None,
    interruptions: int,
    warning: str | None,
) -> dict[str, Any]:
    """The ``gpu_profile`` document for one task instance (see the module docstring).

    ``payload`` is what the marker reader returned, None when it returned none; ``warning`` is the
    reader's reason in that case and becomes the document's ``note``. The payload comes from the
    workload's log, so it is cleaned first (``payload.clean``): whatever JSON it holds, this
    returns, and what it left out is listed in ``malformed`` and said in ``note``.
    """
    accelerator = Accelerator.parse(accelerator)
    if payload is not None and not isinstance(payload, Mapping):
        payload, warning = None, NOT_AN_OBJECT
    cleaned = clean_payload(payload) if payload is not None else None
    document: dict[str, Any] = {**copy.deepcopy(EMPTY_PAYLOAD), **(cleaned.payload if cleaned else {})}
    problems = list(cleaned.problems) if cleaned else []
    summaries: list[Mapping[str, Any]] = document["summary"]
    measured = _measured(summaries)
    empty = payload is None or not measured
    duration = _duration(document, problems)
    energy, energy_note = _energy(measured)
    utils = [u for s in measured if (u := finite_number(s.get("util_mean"))) is not None]
    cost, cost_note = estimate_cost(
        accelerator, summaries, backend=backend, instance_type=instance_type, capacity=capacity
    )
    document.update(
        {
            "v": VERSION,
            "backend": backend,
            "workload": workload,
            "accelerator": str(accelerator),
            "capacity": capacity,
            "instance_type": instance_type,
            "interruptions": interruptions,
            "duration_s": duration,
            "gpu_hours": round(sum(finite_number(s.get("seconds")) or 0.0 for s in measured) / 3600, 6),
            "energy_wh": energy,
            "energy_note": energy_note,
            "util_mean": round(sum(utils) / len(utils), 2) if utils else None,
            "cost": cost.to_json() if cost else None,
            "cost_note": cost_note,
            "advice": [a.to_json() for a in advise(summaries, accelerator)],
            "empty": empty,
        }
    )
    # Derived from cleaned, bounded numbers, nothing here can be non-finite; this keeps it so.
    document, unsafe = finite(document)
    problems += unsafe
    note = document.get("note")
    if payload is None:
        note = warning or NO_PROFILE
    elif empty and not note:
        note = warning or (MALFORMED_SUMMARIES if cleaned and cleaned.dropped_summaries else NO_SAMPLES)
    if problems:
        note = f"{note}; {_malformed_note(problems)}" if note else _malformed_note(problems)
    document["note"] = note
    more = len(problems) - MAX_REPORTED
    document["malformed"] = problems[:MAX_REPORTED] + ([f"... and {more} more"] if more > 0 else [])
    return dict(document)
