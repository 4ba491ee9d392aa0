"""Every change to every training Job of a cluster, as a watch of our own sees it, over a whole test.

"One replacement, created after the old Job was gone" is a claim about the whole run, not its end:
the watch starts before the code under test does and records each ADDED, MODIFIED and DELETED, so
that a Job created while another still existed (or one created twice) shows however brief it was.
Used against the Kubernetes emulator, in process (``tests/triggers``) and behind a whole Airflow
(``tests/e2e``).
"""

from __future__ import annotations

import threading

from kubernetes import client, config, watch

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator


class JobHistory(threading.Thread):
    """The Jobs of one namespace, as a watch sees them, from construction until ``stop`` (or the ``with``)."""

    def __init__(self, emulator: KubernetesEmulator, namespace: str = "default") -> None:
        super().__init__(daemon=True)
        self.namespace = namespace
        self.batch = client.BatchV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))
        self.events: list[tuple[str, str]] = []  # (watch event type, Job name)
        self.stop = threading.Event()
        self.version = self.batch.list_namespaced_job(namespace).metadata.resource_version

    def run(self) -> None:
        while not self.stop.is_set():
            stream = watch.Watch().stream(
                self.batch.list_namespaced_job, self.namespace, resource_version=self.version, timeout_seconds=1
            )
            for event in stream:
                self.events.append((event["type"], event["object"].metadata.name))
                self.version = event["object"].metadata.resource_version

    def created(self) -> list[str]:
        """The Jobs created since the watch started, in order (a name twice: made again)."""
        return [name for kind, name in self.events if kind == "ADDED"]

    def assert_one_at_a_time(self) -> None:
        """No Job was created while another one (or one of its name) still existed."""
        alive: set[str] = set()
        for kind, name in self.events:
            if kind == "ADDED":
                assert not alive, f"training Job {name} was created while {alive} still existed"
                alive.add(name)
            elif kind == "DELETED":
                alive.discard(name)

    def __enter__(self) -> JobHistory:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.join(timeout=10)
