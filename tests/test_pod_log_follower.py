"""``PodLogFollower`` against the Kubernetes emulator's real HTTP API, with its streams cut as a real
API server or proxy cuts them; ``parse_stamp`` against the kubelet's RFC 3339 nano format."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client, config

from airflow_gpu.testing import polling
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.utils.pod_log_follower import PodLogFollower, parse_stamp


def _core(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))


def _pod(core: client.CoreV1Api, name: str, script: str) -> None:
    container = {"name": "base", "image": "busybox", "command": ["sh", "-c", script]}
    core.create_namespaced_pod(
        "default", {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container]}}
    )


def _phase(core: client.CoreV1Api, name: str, *phases: str) -> Any:
    return polling.wait_for(lambda: core.read_namespaced_pod(name, "default").status.phase in phases, 30)


class Collected:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.warnings: list[str] = []
        self.lock = threading.Lock()

    def emit(self, line: str) -> None:
        with self.lock:
            self.lines.append(line)


def test_follows_a_running_container_through_cut_streams_without_losing_or_repeating_a_line(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    core = _core(kubernetes_emulator)
    _pod(core, "trainer", "for i in $(seq 1 30); do echo step $i; sleep 0.02; done")
    _phase(core, "trainer", "Running", "Succeeded")
    kubernetes_emulator.inject_api_fault(resource="pods/log", name="trainer", cut_after=4, times=3)
    seen = Collected()
    follower = PodLogFollower(
        core, "default", "trainer", "base", seen.emit, warn=seen.warnings.append, retry_seconds=0.1
    ).start()
    assert follower.finish(60)
    assert seen.lines == [f"step {i}" for i in range(1, 31)]
    assert len(kubernetes_emulator.api_faults_injected) == 3  # every cut happened, and was ridden out
    assert len(seen.warnings) == 1 and "the log of trainer stopped" in seen.warnings[0]


def test_reads_the_whole_log_of_a_container_that_ended_before_it_was_seen_running(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    core = _core(kubernetes_emulator)
    _pod(core, "quick", "printf 'a\\nb\\n::airflow-gpu-result::{}\\nlast-without-newline'")
    _phase(core, "quick", "Succeeded")
    seen = Collected()
    assert PodLogFollower(core, "default", "quick", "base", seen.emit).start().finish(30)
    assert seen.lines == ["a", "b", "::airflow-gpu-result::{}", "last-without-newline"]


def test_waits_for_a_container_that_has_not_started_and_ends_when_its_pod_is_gone(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    core = _core(kubernetes_emulator)
    kubernetes_emulator.inject_api_fault(resource="pods/log", name="late", status=400, times=2)  # "waiting to start"
    _pod(core, "late", "echo up; sleep 60")
    seen = Collected()
    follower = PodLogFollower(core, "default", "late", "base", seen.emit, retry_seconds=0.1).start()
    polling.wait_for(lambda: seen.lines == ["up"], 30)
    core.delete_namespaced_pod("late", "default", grace_period_seconds=0)
    assert follower.finish(30)  # the pod is gone: nothing more will come
    assert seen.lines == ["up"]


def test_stop_ends_the_follower_of_a_container_that_runs_on(kubernetes_emulator: KubernetesEmulator) -> None:
    core = _core(kubernetes_emulator)
    _pod(core, "forever", "echo started; sleep 120")
    seen = Collected()
    follower = PodLogFollower(core, "default", "forever", "base", seen.emit).start()
    polling.wait_for(lambda: seen.lines == ["started"], 30)
    assert not follower.finish(0.2)  # still running: not read to its end
    follower.stop()
    core.delete_namespaced_pod("forever", "default", grace_period_seconds=0)
    assert follower.finish(30)


def _rfc3339_nano(moment: datetime, nanos: int) -> str:
    """As Go's ``time.RFC3339Nano`` writes it: trailing zeros of the fraction dropped, and a lone dot too."""
    fraction = f"{nanos:09d}".rstrip("0")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


moments = st.tuples(
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)).map(
        lambda d: d.replace(microsecond=0, tzinfo=timezone.utc)
    ),
    st.integers(0, 999_999_999),
)


@given(moments, moments)
def test_stamps_order_as_the_instants_they_name(a: tuple[datetime, int], b: tuple[datetime, int]) -> None:
    parsed_a, parsed_b = parse_stamp(_rfc3339_nano(*a)), parse_stamp(_rfc3339_nano(*b))
    assert parsed_a == a and parsed_b == b
    assert (parsed_a < parsed_b) == (a < b)


def test_a_stamp_with_an_offset_is_the_same_instant_in_utc() -> None:
    moment = parse_stamp("2026-11-26T05:00:00.5+02:00")
    assert moment == (datetime(2026, 11, 26, 3, 0, tzinfo=timezone.utc), 500_000_000)
    assert parse_stamp("step 4") is None and parse_stamp("2026-13-40T00:00:00Z") is None
