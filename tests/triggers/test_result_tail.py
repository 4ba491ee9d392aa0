"""What the pod trigger carries of a succeeded pod's result (``triggers/result_tail.py``): the last result
line of the log's tail, nothing when there is none, when it is too big for an event, or when the log cannot
be read (the worker then reads the pod itself). Reads go to the Kubernetes emulator over HTTP."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client, config

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.triggers.cluster import ClusterConnection
from airflow_gpu.triggers.result_tail import MAX_CARRIED_CHARS, _not_carried, read_result_line
from airflow_gpu.utils.results import RESULT_MARKER, last_result_line, read_output


class Said:
    """The trigger's logger, as far as ``read_result_line`` uses it: what it said, formatted."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: object) -> None:
        self.lines.append(message % args)


PLAIN = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")))
RESULT = st.builds(lambda v: RESULT_MARKER + json.dumps(v), st.recursive(
    st.none() | st.integers() | st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)
))  # fmt: skip


@given(st.lists(PLAIN | RESULT | st.builds(lambda t: RESULT_MARKER + t, PLAIN)))
def test_the_line_carried_gives_the_worker_what_the_whole_log_would(lines: list[str]) -> None:
    """The one line the trigger carries, read as the worker reads a log (``read_output``), gives the same
    result as the whole log: the task cannot tell which it read. A last result line that is not JSON is
    not carried (the worker reports it from the log as the workload's bug)."""
    text = "\n".join(lines)
    whole = read_output(text.splitlines())
    last = last_result_line(text.splitlines())
    assert (last is not None) == whole.result_found
    if last is not None and _not_carried(last) is None:
        alone = read_output([last])
        assert (alone.result, alone.result_error) == (whole.result, None) and whole.result_error is None
    elif last is not None:
        assert whole.result_error is not None or "\x00" in last


def test_what_the_database_or_the_worker_should_have_is_not_carried() -> None:
    assert _not_carried(RESULT_MARKER + '{"a": 1}') is None
    assert _not_carried(RESULT_MARKER + '"nul\x00"') == "holds a NUL character, which the metadata database refuses"
    assert _not_carried(RESULT_MARKER + '"escaped \\u0000"') is None  # JSON's escape: stored as text, fine
    assert _not_carried(RESULT_MARKER + "{not json") == "is not JSON"
    assert _not_carried(RESULT_MARKER + '"' + "x" * MAX_CARRIED_CHARS + '"').startswith("has 65560 characters")


def test_a_marker_inside_a_line_is_not_a_result() -> None:
    assert last_result_line(f"log: {RESULT_MARKER}1\n{RESULT_MARKER}2\nnext".splitlines()) == f"{RESULT_MARKER}2"
    assert last_result_line([f"  {RESULT_MARKER}1"]) is None


def run_pod(emulator: KubernetesEmulator, name: str, script: str) -> ClusterConnection:
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))
    container = {"name": "base", "image": "busybox", "command": ["sh", "-c", script]}
    spec = {"restartPolicy": "Never", "tolerations": [{"operator": "Exists"}], "containers": [container]}
    body = {"metadata": {"name": name}, "spec": spec}
    core.create_namespaced_pod("default", body)
    wait_for(lambda: core.read_namespaced_pod(name, "default").status.phase == "Succeeded", 60, "the pod to end")
    return ClusterConnection(config_dict=yaml.safe_load(emulator.kubeconfig()))


def read(connection: ClusterConnection, name: str, said: Said | None = None) -> Any:
    return asyncio.run(read_result_line(connection, "default", name, "base", said or Said()))


@pytest.mark.slow
def test_the_line_is_read_from_the_pods_log_and_a_too_big_one_is_left_to_the_worker(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    connection = run_pod(
        kubernetes_emulator, "small", f"echo '{RESULT_MARKER}1'; echo '{RESULT_MARKER}{{\"a\": 2}}'; echo bye"
    )
    assert read(connection, "small") == f'{RESULT_MARKER}{{"a": 2}}'
    big = "x" * MAX_CARRIED_CHARS
    run_pod(kubernetes_emulator, "big", f"printf '{RESULT_MARKER}\"%s\"\\n' {big}")
    said = Said()
    assert read(connection, "big", said) is None
    (line,) = said.lines
    assert f"has {MAX_CARRIED_CHARS + len(RESULT_MARKER) + 2} characters, more than the {MAX_CARRIED_CHARS}" in line


@pytest.mark.slow
def test_a_log_that_cannot_be_read_carries_nothing_and_says_so(kubernetes_emulator: KubernetesEmulator) -> None:
    connection = ClusterConnection(config_dict=yaml.safe_load(kubernetes_emulator.kubeconfig()))
    said = Said()
    assert read(connection, "no-such-pod", said) is None
    (line,) = said.lines
    assert "pod default/no-such-pod could not be read here (" in line and "404" in line, line
