"""Where Batch would start a RUNNABLE job, or why it cannot (``reasons.py``).

The compute environments of the job's queue are tried in their queue order. One can host the job
when it offers an instance type with the GPUs, vCPUs and memory the job asks for and its
``maxvCpus`` is at least the job's vCPUs. A stalled one (an injected capacity fault) blocks the job
with the stall's reason. When none fits: ``COMPUTE_ENVIRONMENT_MAX_RESOURCE`` if only ``maxvCpus``
was in the way, else ``JOB_RESOURCE_REQUIREMENT``.

A multi-node parallel job (``place_nodes``) needs ``numNodes`` instances of one instance type at once
(its nodes are single-tenant and "all node groups ... must use the same instance type"), so the type
must fit every node group and ``numNodes`` of them must fit in ``maxvCpus``. "Multi-node parallel
jobs aren't supported on compute environments that use Spot Instances" (User Guide, "Compute
environment considerations for MNP") nor on Fargate: such compute environments are passed over, and
a job whose queue has no other stays RUNNABLE with no ``statusReason`` (AWS documents none for it;
AWS ParallelCluster's maintainers: the job "remains in a RUNNABLE state and is never executed",
aws/aws-parallelcluster#2098).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import airflow_gpu.testing.batch.multinode as multinode
from airflow_gpu.accelerators.batch import InstanceOffer
from airflow_gpu.testing.batch.jobs import EmulatedJob, requested_resources
from airflow_gpu.testing.batch.reasons import JOB_RESOURCE, MAX_RESOURCE, Blocked, blocked

if TYPE_CHECKING:
    from airflow_gpu.testing.batch.nodes import MultiNodeJob

#: Compute environment types multi-node parallel jobs do not run on.
NO_MULTINODE = frozenset({"SPOT", "FARGATE", "FARGATE_SPOT"})


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


def _fits(offer: InstanceOffer, wants: Mapping[str, float]) -> bool:
    host = offer.instance_type
    return (
        host.accelerators >= wants["GPU"] and host.vcpus >= wants["VCPU"] and host.memory_gib * 1024 >= wants["MEMORY"]
    )


def place_nodes(
    job: MultiNodeJob,
    offers: Mapping[str, tuple[InstanceOffer, ...]],
    max_vcpus: Mapping[str, int],
    stalled: Mapping[str, str | None],
    capacity: Mapping[str, str],
) -> tuple[str, InstanceOffer] | Blocked:
    """The compute environment and instance type for all of an MNP job's nodes, or why it stays RUNNABLE.

    ``capacity`` maps each compute environment to its ``computeResources.type`` (``EC2``, ``SPOT``...).
    """
    needs = [requested_resources(plan.container, plan.overrides) for plan in job.plan]
    wants = {kind: max(need[kind] for need in needs) for kind in ("GPU", "VCPU", "MEMORY")}
    properties = job.job_definition.node_properties
    assert properties is not None
    named = multinode.instance_type(properties)
    count = len(job.plan)
    order = sorted(job.job_queue.env_order_json, key=lambda entry: entry["order"])
    eligible = too_small = False
    for name in (entry["computeEnvironment"].rsplit("/", 1)[-1] for entry in order):
        if capacity.get(name) in NO_MULTINODE:
            continue
        eligible = True
        fitting = [
            o
            for o in offers.get(name, ())
            if _fits(o, wants)
            and (named is None or named in (o.instance_type.name, o.instance_type.name.split(".")[0]))
        ]
        affordable = [
            o for o in fitting if count * o.instance_type.vcpus <= max_vcpus.get(name, count * o.instance_type.vcpus)
        ]
        if fitting and not affordable:
            too_small = True
        if not affordable:
            continue
        smallest = min(affordable, key=lambda o: (o.instance_type.accelerators, o.instance_type.vcpus))
        if name in stalled:
            return blocked(stalled[name], smallest.instance_type.name)
        return name, smallest
    if not eligible:
        return Blocked(None)
    return blocked(MAX_RESOURCE if too_small else JOB_RESOURCE)
