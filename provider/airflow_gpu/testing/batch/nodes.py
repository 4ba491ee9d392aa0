"""A multi-node parallel (MNP) job and its nodes, with the DescribeJobs shapes AWS gives each.

"Multi-node parallel jobs are submitted as a single job ... Each multi-node parallel job contains a
main node, which is launched first. After the main node is up, the child nodes are launched and
started." (AWS Batch User Guide, "Multi-node parallel jobs".) ``MultiNodeJob`` is the submitted job;
each ``NodeJob`` is one node, addressed ``<jobId>#<index>`` ("You can address nodes using the #N
notation (starting with 0)"). The driver steps the job (``gang.py``) and runs each node as it runs
any container job (``driver.py``).

The shapes follow DescribeJobs answers that AWS ParallelCluster recorded from the service for its
CLI tests (``cli/tests/awsbatch/data/aws_api_responses/batch_describe-jobs_single_mnp_job*.json``)
and the User Guide ("The started, stoppedAt, statusReason, and exit information for a multi-node
parallel job is populated from the main node"):

* the job: ``nodeProperties`` (``numNodes`` as overridden, each range's container with its
  overrides), no ``container``; ``startedAt``, ``stoppedAt`` and ``attempts`` are the main node's,
  each attempt's ``container`` only ``exitCode``, ``logStreamName`` and an empty
  ``networkInterfaces`` (so the amazon provider's ``get_job_all_awslogs_info`` finds the main
  node's stream there, as on AWS).
* a node: ``nodeDetails`` ``{nodeIndex, isMainNode}``, its own ``container`` (its range's container
  with the overrides, ``logStreamName``, ``taskArn``, ``networkInterfaces``...), its own
  ``attempts``, no ``nodeProperties``. A node exists from the moment it is launched: in the recorded
  answers a node's ``createdAt`` is its launch, long after the job's.
* ListJobs: the job's summary carries ``nodeProperties`` ``{numNodes}``, a node's (``multiNodeJobId``)
  ``{nodeIndex, isMainNode}`` (``NodePropertiesSummary``).

MNP containers use the ``awsvpc`` network mode: "Each multi-node parallel job container gets its own
elastic network interface, a primary private IP address" ("Compute environment considerations for
MNP"). Every emulated node runs on this host, so each node's ENI has the private IPv4 address
``NODE_PRIVATE_IP`` (127.0.0.1), and that is the ``AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS``
child nodes get: a main node that listens on all interfaces or on 127.0.0.1 is reachable there.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from moto.batch.models import datetime2int_milliseconds

import airflow_gpu.testing.batch.multinode as multinode
from airflow_gpu.testing.batch.jobs import NEVER, EmulatedJob
from airflow_gpu.testing.batch.multinode import NodePlan

#: The private IPv4 address of every emulated node's network interface: they all run on this host.
NODE_PRIVATE_IP = "127.0.0.1"


class MultiNodeJob(EmulatedJob):
    """The submitted MNP job: no process of its own; its nodes run, its main node decides its outcome."""

    def __init__(self, *args: Any, node_overrides: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.node_overrides = dict(node_overrides or {})
        properties = self.job_definition.node_properties
        assert properties is not None
        self.plan: list[NodePlan] = multinode.plan(properties, self.node_overrides)
        self.main_index: int = properties["mainNode"]
        self.nodes: dict[int, NodeJob] = {}  # created as they are launched
        self.children_launched = False  # in the current attempt

    def container_properties(self) -> dict[str, Any] | None:
        return None

    @property
    def main(self) -> NodeJob | None:
        return self.nodes.get(self.main_index)

    def main_private_ip(self) -> str:
        interfaces = (
            ((self.main.latest_attempt or {}).get("container") or {}).get("networkInterfaces") if self.main else None
        )
        return str(interfaces[0]["privateIpv4Address"]) if interfaces else NODE_PRIVATE_IP

    def describe_short(self) -> dict[str, Any]:
        result: dict[str, Any] = super().describe_short()
        result["nodeProperties"] = {"numNodes": len(self.plan)}
        return result

    def describe(self) -> dict[str, Any]:
        result = super().describe()
        result.pop("container", None)
        properties = self.job_definition.node_properties
        assert properties is not None
        result["nodeProperties"] = multinode.described(properties, self.node_overrides)
        main = self.main
        result["attempts"] = [_job_attempt(a) for a in main.attempts] if main is not None else []
        result.pop("startedAt", None)
        if main is not None and main.job_started_at != NEVER:
            result["startedAt"] = datetime2int_milliseconds(main.job_started_at)
        if self.job_stopped and main is not None and main.job_stopped:
            result["stoppedAt"] = datetime2int_milliseconds(main.job_stopped_at)
        return result


def _job_attempt(attempt: Mapping[str, Any]) -> dict[str, Any]:
    """A main node attempt as the MNP job reports it: exit information and log stream only."""
    container = attempt.get("container") or {}
    shown: dict[str, Any] = {"networkInterfaces": []}
    shown.update({k: container[k] for k in ("exitCode", "logStreamName", "reason") if k in container})
    result: dict[str, Any] = {"container": shown}
    result.update({k: attempt[k] for k in ("startedAt", "stoppedAt", "statusReason") if k in attempt})
    return result


class NodeJob(EmulatedJob):
    """One node of an MNP job: a container job whose retries and ending its job decides."""

    retries_itself = False  # "a main node failure causes another attempt ... Child node failures don't"

    def __init__(self, parent: MultiNodeJob, plan: NodePlan) -> None:
        super().__init__(
            parent.job_name,
            parent.job_definition,
            parent.job_queue,
            parent.backend,
            log_backend=parent._log_backend,
            container_overrides=dict(plan.overrides),
            eks_properties_override=None,
            depends_on=None,
            parameters=dict(parent.parameters),
            all_jobs=parent.all_jobs,
            timeout=parent.timeout,
            array_properties={},
            provided_job_id=f"{parent.job_id}#{plan.index}",
        )
        self.job_queue.jobs.remove(self)  # ListJobs by queue lists the job; its nodes come by multiNodeJobId
        self.parent, self.plan = parent, plan
        self.node_index = plan.index
        self.job_attempt = 0  # which attempt of the job this launch belongs to

    @property
    def is_main(self) -> bool:
        return self.node_index == self.parent.main_index

    def container_properties(self) -> dict[str, Any] | None:
        return dict(self.plan.container)

    def network_interfaces(self) -> list[dict[str, str]]:
        return [{"attachmentId": str(uuid.uuid4()), "privateIpv4Address": NODE_PRIVATE_IP}]

    def extra_environment(self) -> dict[str, str]:
        """The User Guide's MNP "Environment variables", beside the standard ones every job gets.

        ``AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS``: "This variable is only set in multi-node parallel
        job child nodes. This variable isn't present on the main node." ``AWS_BATCH_JOB_ID`` (set by the
        driver) is the node's own id, ``<jobId>#<index>``: AWS ParallelCluster's MNP scripts strip the
        ``#<index>`` from it ("AWS_BATCH_JOB_ID is in the format job_id#node_id").
        """
        env = {
            "AWS_BATCH_JOB_NODE_INDEX": str(self.node_index),
            "AWS_BATCH_JOB_NUM_NODES": str(len(self.parent.plan)),
            "AWS_BATCH_JOB_MAIN_NODE_INDEX": str(self.parent.main_index),
        }
        if not self.is_main:
            env["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] = self.parent.main_private_ip()
        return env

    def attempt_number(self) -> int:
        return self.job_attempt

    def relaunch(self, attempt: int) -> None:
        """Start over for the job's next attempt ("Each new attempt of a multi-node parallel job updates
        the corresponding attempt of its associated child nodes")."""
        with self.lock:
            self.job_attempt = attempt
            self.finished = self.job_stopped = self.halted = False
            self.job_stopped_reason, self.exit_code, self.termination = None, None, None
            self.reclaim, self.signalled_at, self.blocked = None, None, None
            self.status = "STARTING"

    def describe_short(self) -> dict[str, Any]:
        result: dict[str, Any] = super().describe_short()
        result["nodeProperties"] = {"nodeIndex": self.node_index, "isMainNode": self.is_main}
        return result

    def describe(self) -> dict[str, Any]:
        result = super().describe()
        result.pop("nodeProperties", None)
        result["nodeDetails"] = {"nodeIndex": self.node_index, "isMainNode": self.is_main}
        return result
