"""``airflow-gpu emulate batch``: prints how to reach it, serves, and stops its jobs on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from airflow_gpu.testing.polling import wait_for


@pytest.mark.slow  # a fresh Python process that imports moto and starts the emulator, and a job in it
def test_emulate_batch_serves_until_sigterm() -> None:
    command = [str(Path(sys.executable).with_name("airflow-gpu")), "emulate", "batch"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        lines = [server.stdout.readline() for _ in range(3)]
        assert lines[0].startswith("AWS Batch emulator on http://127.0.0.1:")
        assert lines[1].strip() == "queues: gpu-spot, gpu-on-demand"
        assert lines[2].startswith("export AIRFLOW_CONN_AWS_DEFAULT='")
        connection = json.loads(lines[2].split("=", 1)[1].strip().strip("'"))
        endpoint = connection["extra"]["endpoint_url"]
        assert lines[0].split()[4] == endpoint and connection["conn_type"] == "aws"
        kwargs = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        credentials = {"aws_access_key_id": connection["login"], "aws_secret_access_key": connection["password"]}
        batch = boto3.client("batch", **kwargs, **credentials)
        logs = boto3.client("logs", **kwargs, **credentials)
        batch.register_job_definition(
            jobDefinitionName="long",
            type="container",
            containerProperties={
                "image": "busybox",
                "command": ["sh", "-c", "echo $$; sleep 300"],
                "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "512"}],
            },
        )
        job_id = batch.submit_job(jobName="long", jobQueue="gpu-spot", jobDefinition="long")["jobId"]

        def pid() -> int | None:
            stream = batch.describe_jobs(jobs=[job_id])["jobs"][0]["container"].get("logStreamName")
            if not stream:
                return None
            events = logs.get_log_events(logGroupName="/aws/batch/job", logStreamName=stream)["events"]
            return int(events[0]["message"]) if events else None

        job_pid = wait_for(pid, 30, "the job's process")
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
        with pytest.raises(ProcessLookupError):  # os.kill(pid, 0) raises once the process is gone
            wait_for(lambda: os.kill(job_pid, 0), 10, "the job's process to be gone")
    finally:
        if server.poll() is None:
            server.kill()
