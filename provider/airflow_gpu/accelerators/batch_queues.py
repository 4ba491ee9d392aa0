"""Which AWS Batch queue can launch which candidate accelerator, read from the queues' compute environments.

Batch never refuses a job that no compute environment of its queue can host: the job sits in
RUNNABLE for ever. Reading the queues first lets a task skip a candidate nobody offers, or fail at
once with "queue gpu-spot offers g5 (A10G) only". But the check must never refuse a valid setup:
an UNMANAGED compute environment lists no instance types, and a family this catalog does not know
may carry GPUs, so such queues are *unknown*, and a job for them is submitted with a warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from airflow_gpu.accelerators.batch import InstanceOffer, describe_offers
from airflow_gpu.accelerators.errors import AcceleratorSpecError
from airflow_gpu.accelerators.spec import Accelerator
from airflow_gpu.spot.policy import Placement

CAPACITY_QUEUES = ("spot", "on-demand")
#: ``instanceTypes`` values that let Batch pick from CPU families only (AWS Batch docs:
#: "optimal" and the ``default_*`` aliases choose among C, M and R families).
CPU_ONLY_ALIASES = frozenset({"optimal", "default_x86_64", "default_arm64"})


@dataclass(frozen=True)
class QueueOffer:
    """A job queue, whether its capacity is spot, and the accelerator instance types it launches.

    ``unknown`` names what could not be read (an UNMANAGED compute environment, an instance type
    the catalog does not know): with any, the queue may launch more than ``offers`` says.
    """

    name: str
    capacity: str  # "spot", "on-demand" or "mixed"
    offers: tuple[InstanceOffer, ...]
    unknown: tuple[str, ...] = ()
    #: Whether a compute environment of the queue is Fargate (no GPUs, no multi-node jobs).
    fargate: bool = False

    def can_run(self, accelerator: Accelerator) -> bool:
        """Whether a listed instance type carries the accelerator (``unknown`` aside)."""
        names = {v.memory_gb for v in accelerator.variants}
        return any(
            o.accelerator == accelerator.type
            and o.instance_type.accelerators >= accelerator.count
            and o.instance_type.memory_gb in names
            for o in self.offers
        )

    def might_run(self, accelerator: Accelerator) -> bool:
        return bool(self.unknown) or self.can_run(accelerator)

    def describe(self) -> str:
        text = f"queue {self.name} ({self.capacity}) offers {describe_offers(self.offers)}"
        return text + (f", and what we cannot read: {', '.join(self.unknown)}" if self.unknown else "")


def check_queues(job_queue: str | None, job_queues: Mapping[str, str] | None) -> dict[str, str]:
    """``job_queues`` by capacity type, checked at parse time; empty when one ``job_queue`` is given."""
    if job_queue and job_queues:
        raise AcceleratorSpecError(
            "job_queues", dict(job_queues), "give job_queue or job_queues, not both", ["job_queue='gpu-spot'"]
        )
    if job_queues is None:
        if not job_queue:
            raise AcceleratorSpecError("job_queue", job_queue, "a job queue is required", ["'gpu-spot'"])
        return {}
    unknown = set(job_queues) - set(CAPACITY_QUEUES)
    if unknown or not job_queues:
        raise AcceleratorSpecError(
            "job_queues", dict(job_queues), "keys are capacity types", ["{'spot': ..., 'on-demand': ...}"]
        )
    return dict(job_queues)


def unreadable_types(instance_types: Sequence[str], offers: Sequence[InstanceOffer]) -> list[str]:
    """Instance types or families in ``instance_types`` that neither the catalog nor the CPU aliases explain."""
    known = {o.instance_type.name for o in offers} | {o.instance_type.name.split(".", 1)[0] for o in offers}
    return [t for t in instance_types if t.lower() not in known and t.lower() not in CPU_ONLY_ALIASES]


def offered_placement(
    placement: Placement,
    candidates: Sequence[Accelerator],
    queues: Mapping[str, str],
    default_queue: str,
    offers: Mapping[str, QueueOffer],
) -> Placement:
    """The first placement, from ``placement`` on, whose queue launches its candidate.

    The placement's own capacity is tried first, then the other capacity (a GPU only on
    on-demand capacity), then the next candidates. Without queue information, or when nothing
    is known to launch anything, the placement stands.
    """
    if not offers:
        return placement
    order = [placement.capacity, *(c for c in CAPACITY_QUEUES if c != placement.capacity)]
    for candidate in range(placement.candidate, len(candidates)):
        for capacity in order if queues else [placement.capacity]:
            if queues and capacity not in queues:
                continue
            queue = offers.get(queues[capacity] if queues and capacity else default_queue)
            if queue is not None and queue.might_run(candidates[candidate]):
                return Placement(candidate, capacity)  # type: ignore[arg-type]
    return placement


def check_offers(offers: Sequence[QueueOffer], candidates: Sequence[Accelerator]) -> tuple[str | None, list[str]]:
    """Why no queue can launch any candidate (None when one might), and what to warn about."""
    warnings = [f"{o.describe()}: cannot tell which GPUs it launches; submitting as asked" for o in offers if o.unknown]
    if not any(o.might_run(c) for o in offers for c in candidates):
        wanted = ", ".join(str(c) for c in candidates)
        return f"no queue can launch {wanted}: " + "; ".join(o.describe() for o in offers), warnings
    first = next(c for c in candidates if any(o.might_run(c) for o in offers))
    return None, [*warnings, *landing_warnings(first, offers)]


def landing_warnings(spec: Accelerator, offers: Sequence[QueueOffer]) -> list[str]:
    """Batch, not the job, picks the instance type among the queue's: say where else a job may land."""
    warnings = []
    for offer in offers:
        others = sorted(
            {o.accelerator for o in offer.offers if o.accelerator != spec.type}
            & {o.accelerator for o in offer.offers if o.instance_type.accelerators >= spec.count}
        )
        if others:
            warnings.append(
                f"{offer.describe()}: a job asking for {spec.count} GPUs may land on {', '.join(others)} "
                f"instead of {spec.type}; give {spec.type} a queue of its own to be sure"
            )
    return warnings
