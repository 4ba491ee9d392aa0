"""Multi-node parallel jobs through boto3, as the AWS Batch User Guide describes them.

"Each multi-node parallel job contains a main node, which is launched first. After the main node is
up, the child nodes are launched and started. The job is finished only if the main node exits. All
child nodes are then stopped." "The final job status (SUCCEEDED or FAILED) is determined by the final
job status of the main node." "If a child node dies, AWS Batch doesn't take any action on the other
nodes in the job." "If you specify job retries, a main node failure causes another attempt to occur.
Child node failures don't cause more attempts to occur." The DescribeJobs shapes are those AWS
ParallelCluster recorded from the service (``nodes.py``).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu.testing.batch.emulator import BatchEmulator
from tests.testing.batch.api import (
    DEFAULT_GROUP,
    describe,
    final,
    launched,
    logged,
    node_container,
    register_multinode,
    status_is,
)

# slow: every case starts a multi-node job's processes (a main node, then its children) and waits for their
# rendezvous and end: seconds per test, which make test runs beside the rest and the inner loop skips
pytestmark = pytest.mark.slow

ESSENTIAL = "Essential container in task exited"

#: One script for every node, the pattern the User Guide gives: the main node (its index equals
#: AWS_BATCH_JOB_MAIN_NODE_INDEX) listens, a child connects to AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS
#: (retrying: "There are no guarantees on the timing or ordering of child node launch").
RENDEZVOUS = """
import os, socket, time
for name in sorted(n for n in os.environ if n.startswith("AWS_BATCH_")):
    print(f"{name}={os.environ[name]}", flush=True)
port = int(os.environ["PORT"])
if os.environ["AWS_BATCH_JOB_NODE_INDEX"] == os.environ["AWS_BATCH_JOB_MAIN_NODE_INDEX"]:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(1)
    peer, _ = server.accept()
    print("main heard:", peer.recv(100).decode(), flush=True)
    peer.sendall(b"welcome")
else:
    address = os.environ["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"]
    for _ in range(400):
        try:
            peer = socket.create_connection((address, port), timeout=5)
            break
        except OSError:
            time.sleep(0.05)  # the workload retries its connect until the main node listens, as clients do
    peer.sendall(("hello from node " + os.environ["AWS_BATCH_JOB_NODE_INDEX"]).encode())
    print("child heard:", peer.recv(100).decode(), flush=True)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def env_lines(lines: list[str]) -> dict[str, str]:
    return dict(line.split("=", 1) for line in lines if line.startswith("AWS_BATCH_"))


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def test_two_nodes_rendezvous_and_the_job_succeeds(emulator: BatchEmulator, batch: Any) -> None:
    container = node_container([sys.executable, "-c", RENDEZVOUS], {"PORT": str(free_port())})
    definition = register_multinode(batch, "rendezvous", {"0:": container})
    job_id = batch.submit_job(jobName="rendezvous", jobQueue="gpu-on-demand", jobDefinition=definition)["jobId"]
    job = final(batch, job_id)
    main, child = final(batch, f"{job_id}#0"), final(batch, f"{job_id}#1")
    assert (job["status"], main["status"], child["status"]) == ("SUCCEEDED", "SUCCEEDED", "SUCCEEDED")

    # the job: nodeProperties, no container, the main node's exit information and attempts
    assert job["statusReason"] == ESSENTIAL and "container" not in job and "nodeDetails" not in job
    assert job["nodeProperties"]["numNodes"] == 2 and job["nodeProperties"]["mainNode"] == 0
    assert [r["targetNodes"] for r in job["nodeProperties"]["nodeRangeProperties"]] == ["0:"]
    stream = main["container"]["logStreamName"]
    [attempt] = job["attempts"]
    assert attempt["container"] == {"exitCode": 0, "logStreamName": stream, "networkInterfaces": []}
    assert attempt["statusReason"] == ESSENTIAL and attempt["startedAt"] == main["attempts"][0]["startedAt"]
    assert (job["startedAt"], job["stoppedAt"]) == (main["startedAt"], main["stoppedAt"])

    # the nodes: nodeDetails, a container of their own, an ENI each; the children launched once the main ran
    for node, index in ((main, 0), (child, 1)):
        assert node["nodeDetails"] == {"nodeIndex": index, "isMainNode": index == 0}
        assert "nodeProperties" not in node and len(node["attempts"]) == 1
        [eni] = node["attempts"][0]["container"]["networkInterfaces"]
        assert eni["privateIpv4Address"] == "127.0.0.1" and node["container"]["networkInterfaces"] == [eni]
        assert node["container"]["exitCode"] == 0 and node["container"]["command"][0] == sys.executable
        assert node["container"]["logStreamName"] == node["attempts"][0]["container"]["logStreamName"]
    assert child["createdAt"] >= main["startedAt"] and child["startedAt"] >= main["startedAt"]
    assert main["createdAt"] >= job["createdAt"]
    assert main["container"]["logStreamName"] != child["container"]["logStreamName"]

    # each node's own log stream: its environment, and the conversation
    main_lines = logged(emulator, stream, 8)  # 7 variables and what it heard
    child_lines = logged(emulator, child["container"]["logStreamName"], 9)  # and the main node's address
    assert "main heard: hello from node 1" in main_lines and "child heard: welcome" in child_lines
    common = {"AWS_BATCH_JOB_ATTEMPT": "1", "AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
              "AWS_BATCH_JQ_NAME": "gpu-on-demand", "AWS_BATCH_CE_NAME": "gpu-on-demand-ce"}  # fmt: skip
    assert env_lines(main_lines) == {**common, "AWS_BATCH_JOB_ID": f"{job_id}#0", "AWS_BATCH_JOB_NODE_INDEX": "0"}
    assert env_lines(child_lines) == {
        **common,
        "AWS_BATCH_JOB_ID": f"{job_id}#1",
        "AWS_BATCH_JOB_NODE_INDEX": "1",
        "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "127.0.0.1",
    }

    # ListJobs: the queue lists the job (with its node count), multiNodeJobId lists its nodes
    listed = batch.list_jobs(jobQueue="gpu-on-demand", jobStatus="SUCCEEDED")["jobSummaryList"]
    [summary] = [s for s in listed if s["jobId"].startswith(job_id)]
    assert summary["jobId"] == job_id and summary["nodeProperties"] == {"numNodes": 2}
    nodes = batch.list_jobs(multiNodeJobId=job_id)["jobSummaryList"]
    assert sorted((n["jobId"], n["nodeProperties"]["nodeIndex"], n["nodeProperties"]["isMainNode"]) for n in nodes) == [
        (f"{job_id}#0", 0, True),
        (f"{job_id}#1", 1, False),
    ]


def test_node_overrides_change_the_node_count_and_a_range_s_container(
    emulator: BatchEmulator, batch: Any, tmp_path: Path
) -> None:
    main = node_container(sh(f"echo main $AWS_BATCH_JOB_NUM_NODES; until [ -e {tmp_path}/2 ]; do sleep 0.05; done"))
    workers = node_container(sh("echo worker from the definition"), {"FROM_DEFINITION": "yes"})
    definition = register_multinode(batch, "overridden", {"0:0": main, "1:": workers})
    echo = "echo worker $AWS_BATCH_JOB_NODE_INDEX $FROM_DEFINITION $ADDED"
    override = {
        "command": sh(f"{echo}; touch {tmp_path}/$AWS_BATCH_JOB_NODE_INDEX"),
        "environment": [{"name": "ADDED", "value": "by-override"}],
    }
    job_id = batch.submit_job(
        jobName="overridden", jobQueue="gpu-on-demand", jobDefinition=definition,
        nodeOverrides={"numNodes": 3, "nodePropertyOverrides": [{"targetNodes": "1:", "containerOverrides": override}]},
    )["jobId"]  # fmt: skip
    job = final(batch, job_id)
    assert job["status"] == "SUCCEEDED"
    shown = job["nodeProperties"]
    assert shown["numNodes"] == 3
    ranges = {r["targetNodes"]: r["container"] for r in shown["nodeRangeProperties"]}
    assert ranges["0:0"]["command"] == main["command"] and ranges["1:"]["command"] == override["command"]
    assert ranges["1:"]["environment"] == [
        {"name": "FROM_DEFINITION", "value": "yes"},
        {"name": "ADDED", "value": "by-override"},
    ]
    nodes = [final(batch, f"{job_id}#{i}") for i in range(3)]
    assert logged(emulator, nodes[0]["container"]["logStreamName"], 1) == ["main 3"]
    for index in (1, 2):
        assert nodes[index]["container"]["command"] == override["command"]
        assert {"name": "ADDED", "value": "by-override"} in nodes[index]["container"]["environment"]
        lines = logged(emulator, nodes[index]["container"]["logStreamName"], 1)
        assert lines == [f"worker {index} yes by-override"]


def test_a_failed_child_fails_only_itself_and_makes_no_new_attempt(batch: Any, tmp_path: Path) -> None:
    script = (
        'if [ "$AWS_BATCH_JOB_NODE_INDEX" = 0 ]; then '
        f"until [ -e {tmp_path}/child-failing ]; do sleep 0.05; done; sleep 0.3; echo main carries on; "
        f"else touch {tmp_path}/child-failing; exit 3; fi"
    )
    definition = register_multinode(batch, "child-fails", {"0:": node_container(sh(script))}, retry={"attempts": 2})
    job_id = batch.submit_job(jobName="child-fails", jobQueue="gpu-on-demand", jobDefinition=definition)["jobId"]
    job = final(batch, job_id)
    child = final(batch, f"{job_id}#1")
    assert child["status"] == "FAILED" and child["statusReason"] == ESSENTIAL
    assert child["container"]["exitCode"] == 3 and len(child["attempts"]) == 1
    assert job["status"] == "SUCCEEDED" and len(job["attempts"]) == 1  # the main node decides; no retry


def test_the_main_node_decides_and_its_exit_stops_the_children(emulator: BatchEmulator, batch: Any) -> None:
    script = (
        'if [ "$AWS_BATCH_JOB_NODE_INDEX" = 0 ]; then sleep 0.5; exit 4; '
        "else echo child $$; while true; do sleep 0.1; done; fi"
    )
    definition = register_multinode(batch, "main-fails", {"0:": node_container(sh(script))})
    job_id = batch.submit_job(jobName="main-fails", jobQueue="gpu-on-demand", jobDefinition=definition)["jobId"]
    stream = launched(batch, f"{job_id}#1")["container"]["logStreamName"]
    pid = int(logged(emulator, stream, 1)[0].split()[1])
    job = final(batch, job_id)
    assert job["status"] == "FAILED" and job["statusReason"] == ESSENTIAL
    assert job["attempts"][0]["container"]["exitCode"] == 4
    child = final(batch, f"{job_id}#1")  # stopped when the main node exited: SIGTERM, exit 143
    assert child["status"] == "FAILED" and child["container"]["exitCode"] == 143
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_main_node_failure_retries_the_whole_job(emulator: BatchEmulator, batch: Any, tmp_path: Path) -> None:
    script = (
        'if [ "$AWS_BATCH_JOB_NODE_INDEX" = 0 ]; then '
        f"until [ -e {tmp_path}/child-$AWS_BATCH_JOB_ATTEMPT ]; do sleep 0.05; done; "
        '[ "$AWS_BATCH_JOB_ATTEMPT" = 2 ]; '
        f"else echo child attempt $AWS_BATCH_JOB_ATTEMPT; touch {tmp_path}/child-$AWS_BATCH_JOB_ATTEMPT; sleep 60; fi"
    )
    definition = register_multinode(batch, "retried", {"0:": node_container(sh(script))}, retry={"attempts": 2})
    job_id = batch.submit_job(jobName="retried", jobQueue="gpu-on-demand", jobDefinition=definition)["jobId"]
    job = final(batch, job_id)
    main, child = final(batch, f"{job_id}#0"), final(batch, f"{job_id}#1")
    assert job["status"] == "SUCCEEDED"
    assert [a["container"]["exitCode"] for a in job["attempts"]] == [1, 0]
    assert [a["container"]["exitCode"] for a in main["attempts"]] == [1, 0]
    assert [a["container"]["exitCode"] for a in child["attempts"]] == [143, 143]  # stopped after each main exit
    streams = [a["container"]["logStreamName"] for a in child["attempts"]]
    assert len(set(streams)) == 2
    assert [logged(emulator, s, 1) for s in streams] == [["child attempt 1"], ["child attempt 2"]]


def test_terminating_the_job_stops_every_node(emulator: BatchEmulator, batch: Any) -> None:
    # Nodes that run until TerminateJob stops them: the termination is under test.
    forever = node_container([sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(600)"])
    definition = register_multinode(batch, "forever", {"0:": forever}, num_nodes=2)
    job_id = batch.submit_job(jobName="forever", jobQueue="gpu-on-demand", jobDefinition=definition)["jobId"]
    streams = [launched(batch, f"{job_id}#{i}")["container"]["logStreamName"] for i in range(2)]
    pids = [int(logged(emulator, s, 1)[0]) for s in streams]
    assert status_is(batch, job_id, "RUNNING")
    batch.terminate_job(jobId=job_id, reason="Terminated by Airflow")
    job = final(batch, job_id)
    assert job["status"] == "FAILED" and job["statusReason"] == "Terminated by Airflow"
    for index in range(2):
        node = final(batch, f"{job_id}#{index}")
        assert node["status"] == "FAILED" and node["statusReason"] == "Terminated by Airflow"
        assert node["container"]["exitCode"] == 143
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_host_lost_under_a_child_fails_that_node_only(emulator: BatchEmulator, batch: Any, tmp_path: Path) -> None:
    script = (
        f'if [ "$AWS_BATCH_JOB_NODE_INDEX" = 0 ]; then until [ -e {tmp_path}/done ]; do sleep 0.05; done; '
        "else while true; do sleep 0.1; done; fi"
    )
    definition = register_multinode(batch, "host-lost", {"0:": node_container(sh(script))})
    job_id = batch.submit_job(jobName="host-lost", jobQueue="gpu-on-demand", jobDefinition=definition)["jobId"]
    running = launched(batch, f"{job_id}#1")
    instance = running["container"]["containerInstanceArn"].rsplit("/", 1)[-1]
    emulator.reclaim(f"{job_id}#1")
    child = final(batch, f"{job_id}#1")
    assert child["status"] == "FAILED" and child["statusReason"] == f"Host EC2 (instance {instance}) terminated."
    assert describe(batch, job_id)["status"] == "RUNNING"  # "AWS Batch doesn't take any action on the other nodes"
    (tmp_path / "done").touch()
    assert final(batch, job_id)["status"] == "SUCCEEDED"


def test_a_host_lost_under_the_main_node_fails_the_job(emulator: BatchEmulator, batch: Any) -> None:
    definition = register_multinode(batch, "main-host-lost", {"0:": node_container(sh("sleep 60"))})
    job_id = batch.submit_job(jobName="main-host-lost", jobQueue="gpu-on-demand", jobDefinition=definition)["jobId"]
    launched(batch, f"{job_id}#1")
    instance = describe(batch, f"{job_id}#0")["container"]["containerInstanceArn"].rsplit("/", 1)[-1]
    emulator.reclaim(job_id, hard=True)  # the job's id names its main node
    job = final(batch, job_id)
    assert job["status"] == "FAILED" and job["statusReason"] == f"Host EC2 (instance {instance}) terminated."
    assert "exitCode" not in job["attempts"][0]["container"]
    assert final(batch, f"{job_id}#1")["status"] == "FAILED"  # stopped with its job


@pytest.fixture
def hook(emulator: BatchEmulator, monkeypatch: pytest.MonkeyPatch) -> Any:
    from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

    monkeypatch.setenv("AIRFLOW_CONN_BATCH_EMULATOR", json.dumps(emulator.airflow_connection()))
    # The hook sleeps 1-10 s (random) between polls so as not to be throttled; a test need not wait that long.
    monkeypatch.setattr(BatchClientHook, "delay", staticmethod(lambda delay=None: __import__("time").sleep(0.1)))
    return BatchClientHook(aws_conn_id="batch_emulator")


class Ti:
    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


@pytest.mark.slow  # the amazon provider's BatchOperator, run in-process against the emulator
def test_the_amazon_provider_on_an_mnp_job(emulator: BatchEmulator, batch: Any, hook: Any, tmp_path: Path) -> None:
    """The unmodified ``BatchOperator`` with ``node_overrides`` submits, waits and links logs as on AWS:
    ``get_job_all_awslogs_info`` reads the job's attempts, i.e. the main node's stream (one per range),
    and a node's own stream when given the node's id.

    The main node ends the job (as on AWS, the others are stopped then), so it waits until node 2 has
    started and written its line: on loaded cores node 2 had not started when a 0.3 s main node ended,
    and had no log stream, as on AWS."""
    from airflow.providers.amazon.aws.operators.batch import BatchOperator

    echo = "echo node $AWS_BATCH_JOB_NODE_INDEX of $AWS_BATCH_JOB_NUM_NODES"
    main_node = node_container(sh(f"{echo}; until [ -e {tmp_path}/2 ]; do sleep 0.05; done"))
    other_nodes = node_container(sh(f"{echo}; touch {tmp_path}/$AWS_BATCH_JOB_NODE_INDEX; sleep 0.3"))
    definition = register_multinode(batch, "from-airflow", {"0:0": main_node, "1:": other_nodes})
    operator = BatchOperator(
        task_id="train", job_name="from-airflow", job_definition=definition, job_queue="gpu-on-demand",
        aws_conn_id="batch_emulator", max_retries=200,
        node_overrides={"numNodes": 3, "nodePropertyOverrides": [
            {"targetNodes": "1:", "containerOverrides": {"environment": [{"name": "ROLE", "value": "worker"}]}}]},
    )  # fmt: skip
    ti = Ti()
    job_id = operator.execute({"ti": ti})  # type: ignore[arg-type]
    job = describe(batch, job_id)
    assert job["status"] == "SUCCEEDED" and job["nodeProperties"]["numNodes"] == 3
    main, worker = describe(batch, f"{job_id}#0"), describe(batch, f"{job_id}#2")
    assert {"name": "ROLE", "value": "worker"} in worker["container"]["environment"]
    main_stream = main["container"]["logStreamName"]
    assert (
        hook.get_job_all_awslogs_info(job_id)
        == [{"awslogs_stream_name": main_stream, "awslogs_group": DEFAULT_GROUP, "awslogs_region": emulator.region}] * 2
    )  # the provider pairs each attempt's stream with each node range's log configuration
    assert hook.get_job_awslogs_info(f"{job_id}#2") == {
        "awslogs_stream_name": worker["container"]["logStreamName"],
        "awslogs_group": DEFAULT_GROUP,
        "awslogs_region": emulator.region,
    }
    assert ti.xcom["cloudwatch_events"]["awslogs_stream_name"] == main_stream
    assert logged(emulator, worker["container"]["logStreamName"], 1) == ["node 2 of 3"]
