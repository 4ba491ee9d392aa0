"""The machines' logs of a training Job (``accelerate_kubernetes.IndexedJobTraining``): followed into the task
log as they come, printed once for a deferred training's last Job, and the main machine's read for the result.

The result line is the main machine's (rank 0), read once its Job ended. The read rides out a throttled or
restarting API server as every other call does (``utils.api_retry``: the soak's fifth run had two trainings
lose their result to one 503). When the log cannot be read at all (the node went with it, or the API stays
down past the retry budget), the result comes from what is left: the line read earlier (the main machine's
follower, as it ran; a deferred training's trigger, at the Job's end: ``triggers.result_tail``), then the
profiler's termination message in the pod's status (``profiling.termination``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from airflow_gpu.spot.training_job import JobPods, rank_of
from airflow_gpu.triggers.result_tail import message_result_line
from airflow_gpu.utils import api_retry
from airflow_gpu.utils.pod_log_follower import PodLogFollower
from airflow_gpu.utils.results import RESULT_MARKER, WorkloadOutput, read_output

#: How long the machines' logs may take to be read to their end once the Job has ended.
LOG_DRAIN_SECONDS = 60.0
#: How long one read of a machine's whole log is asked again (not ``api_retry``'s minutes): a machine whose
#: node is gone but still listed answers through an API server proxy that fails until the node object goes,
#: and the line read earlier or the termination message is there to fall back on.
READ_BUDGET_SECONDS, READ_TIMEOUT_SECONDS = 30.0, (10, 60)


class MachineLogs:
    """The log followers of one try's machines, and the result lines they read."""

    def __init__(self, client: Any, namespace: str, container: str, log: Any) -> None:
        self.client, self.namespace, self.container, self.log = client, namespace, container, log
        self.followers: dict[str, PodLogFollower] = {}
        self._results: dict[str, str] = {}  # pod -> the last result line its follower read

    def follow(self, name: str, pod: Mapping[str, Any]) -> None:
        """Each machine's output into the task log as it comes, prefixed by its rank."""
        if name in self.followers:
            return
        rank = rank_of(pod) or "?"

        def emit(line: str) -> None:
            if line.startswith(RESULT_MARKER):
                self._results[name] = line
            if line.strip() and not line.startswith("::airflow-gpu-"):  # those are read at the end
                self.log.info("[machine %s] %s", rank, line)

        self.followers[name] = PodLogFollower(
            self.client, self.namespace, name, self.container, emit, warn=self.log.warning
        ).start()

    def carried(self, name: str, line: str) -> None:
        """A result line read before this process looked (a deferred training's trigger, at the Job's end)."""
        self._results[name] = line

    def finish(self, killed: bool) -> None:
        """Every machine's log read to its end before the outcome is told, so no line is cut off."""
        deadline = time.monotonic() + LOG_DRAIN_SECONDS
        for name, follower in self.followers.items():
            if killed:
                follower.stop()
            elif not follower.finish(max(0.0, deadline - time.monotonic())):
                self.log.warning("The log of %s was not read to its end in time; the rest is in the pod", name)
        self.followers.clear()

    def stop(self) -> None:
        for follower in list(self.followers.values()):
            follower.stop()

    def print_all(self, pods: JobPods) -> None:
        """A deferred training's last Job: each machine's output into the task log, as it stands now."""
        for pod in sorted(pods.current(), key=lambda p: int(rank_of(p) or 0)):
            name = pod["metadata"]["name"]
            try:
                text = self._read(name)
            except Exception as error:
                self.log.warning("The log of %s could not be read (%s)", name, error)
                continue
            for line in text.splitlines():
                if line.strip() and not line.startswith("::airflow-gpu-"):
                    self.log.info("[machine %s] %s", rank_of(pod), line)

    def main_output(self, main: Mapping[str, Any] | None) -> tuple[WorkloadOutput | None, str | None]:
        """The main machine's output (its result line, its profile), or why it could not be read."""
        if main is None:
            return None, "the main machine's pod was never seen"
        name = main["metadata"]["name"]
        try:
            return read_output(self._read(name).splitlines()), None
        except Exception as error:  # gone with its node, or the API down past the retry budget
            if (line := self._results.get(name)) is not None:
                self.log.info("The main machine's log could not be read (%s); its result line was read earlier (as "
                              "it ran, or by the trigger at the Job's end)", error)  # fmt: skip
                return read_output([line]), None
            if (line := message_result_line(main, self.container)) is not None:
                self.log.info("The main machine's log could not be read (%s); its result line was read from its "
                              "termination message", error)  # fmt: skip
                return read_output([line]), None
            return None, f"its log could not be read ({type(error).__name__}: {error})"

    def _read(self, name: str) -> str:
        response = api_retry.call(
            lambda: self.client.read_namespaced_pod_log(
                name, self.namespace, container=self.container, _preload_content=False,
                _request_timeout=READ_TIMEOUT_SECONDS,
            ),
            f"reading the log of pod {self.namespace}/{name}",
            budget=READ_BUDGET_SECONDS,
            log=self.log,
        )  # fmt: skip
        return str(response.data.decode("utf-8", "replace"))
