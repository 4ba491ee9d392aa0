"""Where Batch would start a RUNNABLE job, or why it cannot (``reasons.py``).

The compute environments of the job's queue are tried in their queue order. One can host the job
when it offers an instance type with the GPUs, vCPUs and memory the job asks for and its
``maxvCpus`` is at least the job's vCPUs. A stalled one (an injected capacity fault) blocks the job
with the stall's reason. When none fits: ``COMPUTE_ENVIRONMENT_MAX_RESOURCE`` if only ``maxvCpus``
was in the way, else ``JOB_RESOURCE_REQUIREMENT``.
"""

from __future__ import annotations

from collections.abc import Mapping

from airflow_gpu.accelerators.batch import InstanceOffer
from airflow_gpu.testing.batch.jobs import EmulatedJob
from airflow_gpu.testing.batch.reasons import JOB_RESOURCE, MAX_RESOURCE, Blocked, blocked


def place(
    job: EmulatedJob,
    offers: Mapping[str, tuple[InstanceOffer, ...]],
    max_vcpus: Mapping[str, int],
    stalled: Mapping[str, str | None],
) -> tuple[str, InstanceOffer] | Blocked:
    """The compute environment and smallest fitting offer, or why the job stays RUNNABLE."""
    wants = job.resources()
    order = sorted(job.job_queue.env_order_json, key=lambda entry: entry["order"])
    too_small = False
    for name in (entry["computeEnvironment"].rsplit("/", 1)[-1] for entry in order):
        fitting = [
            o
            for o in offers.get(name, ())
            if o.instance_type.accelerators >= wants["GPU"]
            and o.instance_type.vcpus >= wants["VCPU"]
            and o.instance_type.memory_gib * 1024 >= wants["MEMORY"]
        ]
        if not fitting:
            continue
        if wants["VCPU"] > max_vcpus.get(name, wants["VCPU"]):
            too_small = True
            continue
        smallest = min(fitting, key=lambda o: (o.instance_type.accelerators, o.instance_type.vcpus))
        if name in stalled:
            return blocked(stalled[name], smallest.instance_type.name)
        return name, smallest
    return blocked(MAX_RESOURCE if too_small else JOB_RESOURCE)
