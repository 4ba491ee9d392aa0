"""The pytest plugin as users get it: registered by entry point, light to load, and leaving no
process behind when a test that uses it fails (run through pytester, a real inner pytest run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.testing.kubernetes.test_faults import _alive

pytest_plugins = ["pytester"]


def test_plugin_module_imports_only_pytest() -> None:
    heavy = "{'aiohttp', 'kubernetes', 'airflow', 'pydantic', 'yaml', 'moto', 'boto3'}"
    probe = (
        "import sys\nimport airflow_gpu.testing.pytest_plugin\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {heavy}))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == "[]"


def test_plugin_is_registered_by_entry_point() -> None:
    from importlib.metadata import entry_points

    assert "airflow_gpu.testing.pytest_plugin" in {ep.value for ep in entry_points(group="pytest11")}


def test_a_failing_test_leaves_no_process_behind(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    pytester.makepyfile(
        f"""
        import time
        from kubernetes import client, config

        def test_fails(kubernetes_emulator):
            api = client.CoreV1Api(config.new_client_from_config(str(kubernetes_emulator.kubeconfig_path)))
            api.create_namespaced_pod("default", {{
                "metadata": {{"name": "sleeper"}},
                "spec": {{"containers": [{{"name": "c", "image": "x", "command": ["sleep", "300"]}}]}},
            }})
            for _ in range(200):
                statuses = api.read_namespaced_pod("sleeper", "default").status.container_statuses or []
                if statuses and statuses[0].container_id:
                    break
                time.sleep(0.05)
            open({str(pid_file)!r}, "w").write(statuses[0].container_id.split("://")[1])
            assert False, "this test fails on purpose"
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    pid = int(pid_file.read_text())
    assert not _alive(pid)


def test_aws_default_connection_reaches_the_batch_emulator(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """Airflow's own hook finds the emulator through ``aws_default``; a failing test kills its jobs."""
    pid_file = tmp_path / "pid"
    pytester.makepyfile(
        f"""
        import time
        from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

        def test_fails(aws_default_connection):
            batch = BatchClientHook(aws_conn_id="aws_default").client
            queues = {{q["jobQueueName"] for q in batch.describe_job_queues()["jobQueues"]}}
            assert queues == {{"gpu-spot", "gpu-on-demand"}}
            batch.register_job_definition(jobDefinitionName="s", type="container", containerProperties={{
                "image": "x", "command": ["sh", "-c", "echo $$ > {pid_file}; sleep 300"],
                "resourceRequirements": [{{"type": "VCPU", "value": "1"}}, {{"type": "MEMORY", "value": "512"}}]}})
            job = batch.submit_job(jobName="s", jobQueue="gpu-on-demand", jobDefinition="s")["jobId"]
            for _ in range(200):
                if batch.describe_jobs(jobs=[job])["jobs"][0]["status"] == "RUNNING":
                    break
                time.sleep(0.05)
            time.sleep(0.5)
            assert False, "this test fails on purpose"
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert not _alive(int(pid_file.read_text()))
