"""Why a RUNNABLE job blocks its queue, in AWS Batch's own words, and what a queue may do about it.

The messages are the ones the AWS Batch User Guide lists under "Jobs stuck in a RUNNABLE status"
(``DescribeJobs`` ``statusReason``). AWS sets one only on the job at the head of a queue that
blocks it; the jobs behind it carry no reason (``queues.py``). A capacity reason also needs a
service role that may call ``autoscaling:DescribeScalingActivities`` and
``ec2:DescribeSpotFleetRequestHistory``: without them no capacity reason appears, and no
``jobStateTimeLimitActions`` acts on one. Only three reasons can be remediated by
``jobStateTimeLimitActions`` (the guide says so of the other ones explicitly).
"""

from __future__ import annotations

from dataclasses import dataclass

INSUFFICIENT_CAPACITY = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
MAX_RESOURCE = "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE"
JOB_RESOURCE = "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT"
SERVICE_ROLE = "MISCONFIGURATION:SERVICE_ROLE_PERMISSIONS"
UNSUPPORTED_INSTANCE = "MISCONFIGURATION:EC2_INSTANCE_CONFIGURATION_UNSUPPORTED"
INVALID_COMPUTE = "ACTION_REQUIRED"
UNDETERMINED = "UNDETERMINED"

#: ``statusReason`` while the job is stuck; ``{instance_type}`` is AWS's ``[instanceTypeName]``.
MESSAGES = {
    INSUFFICIENT_CAPACITY: INSUFFICIENT_CAPACITY
    + " - Service cannot fulfill the capacity requested for instance type {instance_type}",
    MAX_RESOURCE: MAX_RESOURCE + " - CE(s) associated with the job queue cannot meet the CPU requirement of the job.",
    JOB_RESOURCE: JOB_RESOURCE + " - The job resource requirement (vCPU/memory/GPU) is higher than that can be met "
    "by the CE(s) attached to the job queue.",
    SERVICE_ROLE: SERVICE_ROLE + " \u2013 Batch service role has a permission issue.",  # an en dash, as AWS writes it
    UNSUPPORTED_INSTANCE: UNSUPPORTED_INSTANCE
    + " - Your compute environment associated with this job queue has an unsupported instance type configuration.",
    INVALID_COMPUTE: INVALID_COMPUTE + " - CE(s) associated with the job queue are invalid.",
    UNDETERMINED: UNDETERMINED + " - Batch job is blocked, root cause is undetermined.",
}

#: The reasons a queue's ``jobStateTimeLimitActions`` can act on.
TIME_LIMIT_REASONS = frozenset({INSUFFICIENT_CAPACITY, MAX_RESOURCE, JOB_RESOURCE})


@dataclass(frozen=True)
class Blocked:
    """Why the driver could not place a RUNNABLE job; ``code`` None: AWS would not know why."""

    code: str | None
    message: str | None = None


def blocked(code: str | None, instance_type: str = "") -> Blocked:
    """The documented message for ``code``; an unknown code is taken as the whole message."""
    if code is None:
        return Blocked(None)
    if code in MESSAGES:
        return Blocked(code, MESSAGES[code].format(instance_type=instance_type))
    return Blocked(code.split(" ", 1)[0], code)


def canceled_by_time_limit(code: str) -> str:
    """The ``statusReason`` of a job a ``jobStateTimeLimitActions`` entry cancelled."""
    return f"Canceled by JobStateTimeLimit action due to reason: {code}"
