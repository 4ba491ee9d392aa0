"""``AccelerateTrainOperator`` on AWS Batch: one GPU job, or a multi-node parallel job.

One machine is a ``GPUBatchOperator`` job running ``accelerate launch``: queues, spot fallback,
profile, result and takeover after a worker crash are that operator's. Several machines are a
multi-node parallel job (``type: multinode``): the same operator with the job definition's
``nodeProperties`` instead of ``containerProperties`` and the command in ``nodeOverrides``, so the
queues, waiting, deferral, logs and cleanup stay the operator's. Each node runs one machine of the
launch: its rank is ``AWS_BATCH_JOB_NODE_INDEX``, the main machine's address is
``AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS``, which Batch gives the child nodes only; the main
node uses its own address. The main node (index 0) prints the result and its profile.

Multi-node parallel jobs run on on-demand EC2 only (the AWS Batch User Guide: they are not
supported on Spot, nor on Fargate), which ``AccelerateLaunch`` refuses at parse time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_gpu.accelerators import batch_job
from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.operators.delegation import DelegatedRun, outside_the_users_dag

if TYPE_CHECKING:
    from airflow_gpu.accelerators.accelerate import AccelerateLaunch
    from airflow_gpu.spot.policy import Capacity, Placement

#: The main node's address as each node sees it: given to the children, its own on the main node.
MAIN_ADDRESS = (
    '"${AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS:-'
    "$(python3 -c 'import socket; print(socket.gethostbyname(socket.gethostname()))')}\""
)
MAIN_NODE = 0


def backend_operator(
    launch: AccelerateLaunch, kwargs: Mapping[str, Any], env: Mapping[str, str], *, capacity: Capacity | None
) -> GPUBatchOperator:
    """The ``GPUBatchOperator`` that submits the launch (as a multi-node job for several machines)."""
    arguments = dict(kwargs)
    if launch.num_machines > 1 and arguments.get("job_definition"):
        raise TypeError(
            "AccelerateTrainOperator(target='batch', num_machines>1) registers its own multi-node job definition; "
            "a job_definition of yours is a single-node one"
        )
    if launch.num_machines > 1 and arguments.get("node_overrides"):
        # Batch refuses override ranges that are not the job definition's ("NodeOverride targets should
        # match job definition"), and the launch owns the nodes' command: env= and script_args say the rest.
        raise TypeError("AccelerateTrainOperator(target='batch', num_machines>1) sets the nodes itself; use env=")
    given = arguments.pop("environment", None) or {}
    arguments["do_xcom_push"] = True  # the result line is read from the (main node's) log
    cls = GPUBatchOperator if launch.num_machines == 1 else MultiNodeBatchOperator
    operator = cls(
        **outside_the_users_dag(),
        command=launch.command('"$AWS_BATCH_JOB_NODE_INDEX"', MAIN_ADDRESS),
        environment={**given, **launch.environment(), **env},
        **arguments,
    )
    operator.num_nodes = launch.num_machines
    return operator


def runner(operator: GPUBatchOperator, launch: AccelerateLaunch, *, poll_interval: float, log: Any) -> Any:
    return DelegatedRun(operator)


class MultiNodeBatchOperator(GPUBatchOperator):
    """``GPUBatchOperator`` submitting a multi-node parallel job of ``num_nodes`` identical nodes."""

    num_nodes: int = 2

    def _job_definition(self, definition: dict[str, Any]) -> dict[str, Any]:
        container = definition.pop("containerProperties")
        definition.update(
            type="multinode",
            nodeProperties={
                "numNodes": self.num_nodes,
                "mainNode": MAIN_NODE,
                "nodeRangeProperties": [{"targetNodes": "0:", "container": container}],
            },
        )
        return definition

    def _submission_overrides(self, placement: Placement) -> dict[str, Any]:
        """The container overrides (command, environment) for every node."""
        overrides = self._overrides(placement)
        if refusal := batch_job.overrides_too_long(overrides):
            raise AirflowFailException(refusal)
        # The one range of the job definition, and only it: Batch refuses targets that differ from its ranges.
        return {"nodeOverrides": {"nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": overrides}]}}

    def _check_queue_offers(self) -> None:
        """A multi-node job never starts on Spot or Fargate: AWS leaves it RUNNABLE, so it fails here first."""
        super()._check_queue_offers()
        for offer in self._offers.values():
            if offer.fargate:
                raise AirflowFailException(
                    f"queue {offer.name} runs on Fargate, where multi-node parallel jobs are not supported; "
                    "give an on-demand EC2 queue"
                )
            if offer.capacity == "spot":
                raise AirflowFailException(
                    f"queue {offer.name} is Spot only: multi-node parallel jobs are not supported on Spot compute "
                    "environments (AWS leaves them RUNNABLE); give an on-demand EC2 queue"
                )

    def _log_job(self, job: dict[str, Any]) -> dict[str, Any]:
        """The main node's job (``<id>#0``): its attempts hold the log the result is read from."""
        node = f"{job['jobId']}#{MAIN_NODE}"
        return self.gpu_hook.describe_jobs_batched([node]).get(node) or job
