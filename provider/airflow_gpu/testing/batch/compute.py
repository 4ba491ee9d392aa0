"""The Batch account the emulator serves: compute environments, queues, and what a GPU setup needs.

A real GPU Batch setup is a spot and an on-demand managed compute environment over GPU instance
families, one queue for each, the IAM roles and network they require, and the log group jobs
write to. ``create`` makes exactly that through the public API (boto3 against the endpoint), so
the emulator starts from the same calls a Terraform module would make.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_gpu.accelerators.batch import InstanceOffer, instance_offers

LOG_GROUP = "/aws/batch/job"
GPU_FAMILIES = ("g5", "g6", "p4d", "p5")
TRUST = '{"Version": "2012-10-17", "Statement": []}'


@dataclass(frozen=True)
class ComputeEnvironmentSpec:
    name: str
    capacity: Literal["SPOT", "EC2"]
    instance_types: tuple[str, ...] = GPU_FAMILIES
    max_vcpus: int = 4096

    @property
    def offers(self) -> tuple[InstanceOffer, ...]:
        return instance_offers(self.instance_types)


@dataclass(frozen=True)
class QueueSpec:
    """A job queue; ``job_state_time_limit_actions`` as CreateJobQueue takes them, e.g.
    ``{"reason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", "state": "RUNNABLE", "maxTimeSeconds": 600,
    "action": "CANCEL"}`` (the emulator takes ``maxTimeSeconds`` below AWS's minimum of 600)."""

    name: str
    compute_environments: tuple[str, ...]
    priority: int = 1
    job_state_time_limit_actions: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class BatchSetup:
    compute_environments: tuple[ComputeEnvironmentSpec, ...]
    queues: tuple[QueueSpec, ...]
    tags: dict[str, str] = field(default_factory=dict)


#: ``airflow-gpu emulate batch`` and the demo: queues ``gpu-spot`` and ``gpu-on-demand``.
DEMO = BatchSetup(
    compute_environments=(
        ComputeEnvironmentSpec("gpu-spot-ce", "SPOT"),
        ComputeEnvironmentSpec("gpu-on-demand-ce", "EC2"),
    ),
    queues=(QueueSpec("gpu-spot", ("gpu-spot-ce",)), QueueSpec("gpu-on-demand", ("gpu-on-demand-ce",))),
)


def _role(iam: Any, name: str) -> str:
    try:
        return str(iam.create_role(RoleName=name, AssumeRolePolicyDocument=TRUST)["Role"]["Arn"])
    except iam.exceptions.EntityAlreadyExistsException:
        return str(iam.get_role(RoleName=name)["Role"]["Arn"])


def create(setup: BatchSetup, clients: Any) -> None:
    """Create ``setup`` through the API; ``clients(name)`` returns a boto3 client for a service."""
    ec2, iam, batch, logs = clients("ec2"), clients("iam"), clients("batch"), clients("logs")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="batch-gpu", Description="Batch GPU jobs", VpcId=vpc)["GroupId"]
    service_role = _role(iam, "AWSBatchServiceRole")
    fleet_role = _role(iam, "AmazonEC2SpotFleetRole")
    _role(iam, "ecsInstanceRole")
    try:  # IAM is global: a second emulator in the same process (another region) finds them made
        profile = iam.create_instance_profile(InstanceProfileName="ecsInstanceRole")["InstanceProfile"]["Arn"]
        iam.add_role_to_instance_profile(InstanceProfileName="ecsInstanceRole", RoleName="ecsInstanceRole")
    except iam.exceptions.EntityAlreadyExistsException:
        profile = iam.get_instance_profile(InstanceProfileName="ecsInstanceRole")["InstanceProfile"]["Arn"]
    arns = {}
    for ce in setup.compute_environments:
        resources: dict[str, Any] = {
            "type": ce.capacity,
            "allocationStrategy": "SPOT_PRICE_CAPACITY_OPTIMIZED" if ce.capacity == "SPOT" else "BEST_FIT_PROGRESSIVE",
            "minvCpus": 0,
            "maxvCpus": ce.max_vcpus,
            "instanceTypes": list(ce.instance_types),
            "subnets": [subnet],
            "securityGroupIds": [group],
            "instanceRole": profile,
        }
        if ce.capacity == "SPOT":
            resources["spotIamFleetRole"] = fleet_role
        arns[ce.name] = batch.create_compute_environment(
            computeEnvironmentName=ce.name,
            type="MANAGED",
            state="ENABLED",
            serviceRole=service_role,
            computeResources=resources,
        )["computeEnvironmentArn"]
    for queue in setup.queues:
        limits = [dict(action) for action in queue.job_state_time_limit_actions]
        batch.create_job_queue(
            jobQueueName=queue.name,
            state="ENABLED",
            priority=queue.priority,
            computeEnvironmentOrder=[
                {"order": i + 1, "computeEnvironment": arns[name]} for i, name in enumerate(queue.compute_environments)
            ],
            **({"jobStateTimeLimitActions": limits} if limits else {}),
        )
    logs.create_log_group(logGroupName=LOG_GROUP)
