"""What AWS Batch refuses and where it places multi-node parallel jobs.

RegisterJobDefinition and SubmitJob refuse what the API reference rules out (``multinode.py`` quotes
each rule); "NodeOverride targets should match job definition. Non matching targets - ..." is AWS's
own text. Placement: "Multi-node parallel jobs aren't supported on compute environments that use Spot
Instances" (such a job stays RUNNABLE, with no documented reason), and ``maxvCpus`` must hold every
node's instance at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu.testing.batch.compute import BatchSetup, ComputeEnvironmentSpec, QueueSpec
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.polling import wait_for
from tests.testing.batch.api import describe, final, logged, node_container, register, register_multinode

# slow: most cases run a multi-node job's nodes to their end (seconds each); make test runs them, the inner
# loop skips them
pytestmark = pytest.mark.slow

SETUP = BatchSetup(
    compute_environments=(
        ComputeEnvironmentSpec("spot-ce", "SPOT", ("g5",)),
        ComputeEnvironmentSpec("ec2-ce", "EC2", ("g5",), max_vcpus=8),  # two g5.xlarge (4 vCPUs each)
    ),
    queues=(
        QueueSpec("spot-only", ("spot-ce",)),
        QueueSpec("spot-then-ec2", ("spot-ce", "ec2-ce")),
        QueueSpec("small", ("ec2-ce",)),
    ),
)
MAIN = node_container(["sh", "-c", "echo $AWS_BATCH_CE_NAME"])


@pytest.fixture(scope="module")
def emulator() -> Iterator[BatchEmulator]:
    with BatchEmulator(SETUP, stop_timeout=2) as running:
        yield running


def properties(ranges: dict[str, dict[str, Any]], num_nodes: int = 2, main_node: int = 0) -> dict[str, Any]:
    return {
        "numNodes": num_nodes,
        "mainNode": main_node,
        "nodeRangeProperties": [{"targetNodes": t, "container": c} for t, c in ranges.items()],
    }


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        ({"nodeProperties": properties({"0:0": MAIN, "1:1": MAIN}, num_nodes=3)}, r"account for all nodes \(0:2\)"),
        ({"nodeProperties": properties({"0:": MAIN}, main_node=2)}, "mainNode must be fewer than the number of nodes"),
        ({"nodeProperties": properties({"0:": MAIN}), "platformCapabilities": ["FARGATE"]}, "n.t supported on Fargate"),
        ({"nodeProperties": properties({"0:1": MAIN, "1:": MAIN}, 3)}, "overlap without one holding the other"),
        ({"nodeProperties": properties({"0:2": MAIN})}, "beyond numNodes 2"),
        ({"nodeProperties": properties({f"{i}:{i}": MAIN for i in range(6)}, 6)}, "6 node groups; .* up to 5$"),
        ({"nodeProperties": properties({"a:b": MAIN})}, "must be a range of node indexes"),
        ({"nodeProperties": properties({"0:": {**MAIN, "image": ""}})}, r"container must contain image"),
        ({}, "nodeProperties must be provided"),
        ({"nodeProperties": properties({"0:": MAIN}), "containerProperties": MAIN}, "containerProperties can't be"),
        ({"nodeProperties": {**properties({"0:0": MAIN, "1:": MAIN}), "nodeRangeProperties": [
            {"targetNodes": "0:0", "container": MAIN, "instanceTypes": ["g5.xlarge"]},
            {"targetNodes": "1:", "container": MAIN, "instanceTypes": ["g5.2xlarge"]}]}}, "the same instance type"),
    ],
    ids=["uncovered", "main-node", "fargate", "overlap", "beyond", "six-groups", "syntax", "image", "no-nodes",
         "container-too", "instance-types"],
)  # fmt: skip
def test_register_refuses_what_aws_refuses(batch: Any, arguments: dict[str, Any], refusal: str) -> None:
    with pytest.raises(batch.exceptions.ClientException) as refused:
        batch.register_job_definition(jobDefinitionName="refused", type="multinode", **arguments)
    assert re.search(refusal, refused.value.response["Error"]["Message"])


def test_node_properties_belong_to_a_multinode_definition(batch: Any) -> None:
    with pytest.raises(batch.exceptions.ClientException, match="with type multinode"):
        batch.register_job_definition(
            jobDefinitionName="typed", type="container", nodeProperties=properties({"0:": MAIN})
        )


def test_a_definition_describes_its_node_properties(batch: Any) -> None:
    definition = register_multinode(batch, "described", {"0:0": MAIN, "1:": MAIN})
    [shown] = batch.describe_job_definitions(jobDefinitions=[definition])["jobDefinitions"]
    assert shown["type"] == "multinode" and "containerProperties" not in shown
    assert shown["nodeProperties"] == properties({"0:0": MAIN, "1:": MAIN})


@pytest.mark.parametrize(
    ("ranges", "main_node", "submission", "refusal"),
    [
        ({"0:": MAIN}, 0, {"nodeOverrides": {"nodePropertyOverrides": [
            {"targetNodes": "0:0", "containerOverrides": {}}, {"targetNodes": "1:1", "containerOverrides": {}}]}},
         "^NodeOverride targets should match job definition. Non matching targets - 0:0,1:1$"),
        ({"0:0": MAIN, "1:1": MAIN}, 0, {"nodeOverrides": {"numNodes": 3}}, "open upper boundary"),
        ({"0:": MAIN}, 1, {"nodeOverrides": {"numNodes": 1}}, "main node index 1"),
        ({"0:0": MAIN, "2:": MAIN, "1:1": MAIN}, 0, {"nodeOverrides": {"numNodes": 2}}, "lower boundary"),
        ({"0:": MAIN}, 0, {"containerOverrides": {"command": ["true"]}}, "send nodeOverrides"),
        ({"0:": MAIN}, 0, {"arrayProperties": {"size": 2}}, "can't be an array job"),
    ],
    ids=["targets", "no-open-range", "main-node", "lower-boundary", "container-overrides", "array"],
)  # fmt: skip
def test_submit_refuses_what_aws_refuses(
    batch: Any, ranges: dict[str, Any], main_node: int, submission: dict[str, Any], refusal: str
) -> None:
    num_nodes = 3 if "2:" in ranges else 2
    definition = register_multinode(batch, "submitted", ranges, num_nodes=num_nodes, main_node=main_node)
    with pytest.raises(batch.exceptions.ClientException) as refused:
        batch.submit_job(jobName="refused", jobQueue="small", jobDefinition=definition, **submission)
    assert re.search(refusal, refused.value.response["Error"]["Message"])


def test_node_overrides_need_a_multinode_definition(batch: Any) -> None:
    definition = register(batch, "single", ["true"], gpus=0)
    with pytest.raises(batch.exceptions.ClientException, match="type is not multinode"):
        batch.submit_job(jobName="single", jobQueue="small", jobDefinition=definition, nodeOverrides={"numNodes": 2})


def test_nested_ranges_the_inner_one_wins(emulator: BatchEmulator, batch: Any, tmp_path: Path) -> None:
    """ "You can nest node ranges (for example, 0:10 and 4:5). In this case, the 4:5 range properties
    override the 0:10 properties.\""""
    everyone = node_container(["sh", "-c", f"echo from 0: $AWS_BATCH_JOB_NODE_INDEX; touch {tmp_path}/child"])
    main = node_container(["sh", "-c", f"echo from 0:0; until [ -e {tmp_path}/child ]; do sleep 0.05; done"])
    definition = register_multinode(batch, "nested", {"0:": everyone, "0:0": main})
    job_id = batch.submit_job(jobName="nested", jobQueue="small", jobDefinition=definition)["jobId"]
    assert final(batch, job_id)["status"] == "SUCCEEDED"
    streams = [final(batch, f"{job_id}#{i}")["container"]["logStreamName"] for i in range(2)]
    assert [logged(emulator, s, 1) for s in streams] == [["from 0:0"], ["from 0: 1"]]


def test_spot_is_passed_over_and_a_spot_only_queue_never_starts_the_job(emulator: BatchEmulator, batch: Any) -> None:
    definition = register_multinode(batch, "on-spot", {"0:": MAIN})
    on_ec2 = batch.submit_job(jobName="on-ec2", jobQueue="spot-then-ec2", jobDefinition=definition)["jobId"]
    assert final(batch, on_ec2)["status"] == "SUCCEEDED"
    assert logged(emulator, describe(batch, f"{on_ec2}#0")["container"]["logStreamName"], 1) == ["ec2-ce"]

    stuck = batch.submit_job(jobName="on-spot", jobQueue="spot-only", jobDefinition=definition)["jobId"]
    wait_for(lambda: emulator.driver.backend._jobs[stuck].blocked, 30, "the driver to try placing it")
    waited = describe(batch, stuck)
    assert waited["status"] == "RUNNABLE" and "statusReason" not in waited  # AWS documents no reason
    assert batch.describe_jobs(jobs=[f"{stuck}#0"])["jobs"] == []  # no node is launched
    batch.cancel_job(jobId=stuck, reason="MNP jobs don't run on Spot")
    cancelled = final(batch, stuck)
    assert cancelled["status"] == "FAILED" and cancelled["statusReason"] == "MNP jobs don't run on Spot"
    assert cancelled["attempts"] == []


def test_max_vcpus_must_hold_every_node_at_once(batch: Any) -> None:
    definition = register_multinode(batch, "three", {"0:": MAIN}, num_nodes=3)  # 3 x g5.xlarge = 12 > 8 vCPUs
    job_id = batch.submit_job(jobName="three", jobQueue="small", jobDefinition=definition)["jobId"]
    job = wait_for(lambda: (j := describe(batch, job_id)).get("statusReason") and j, 30, "a RUNNABLE reason")
    assert job["status"] == "RUNNABLE" and job["statusReason"] == (
        "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE - CE(s) associated with the job queue cannot meet the CPU "
        "requirement of the job."
    )
    batch.cancel_job(jobId=job_id, reason="too big")
    assert final(batch, job_id)["status"] == "FAILED"
    two = batch.submit_job(jobName="two", jobQueue="small", jobDefinition=definition, nodeOverrides={"numNodes": 2})[
        "jobId"
    ]  # 2 x 4 vCPUs fit
    assert final(batch, two)["status"] == "SUCCEEDED"
