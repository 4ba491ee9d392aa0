"""The spot run of a deferred multi-machine training, carried on in the triggerer: the next Job and Service.

As ``pod_replacement`` does for one pod: the trigger holds the run's ``SpotRun`` and the training
Job and Service of every placement the policy may move to (built by the worker at deferral, one
pair plus a delta per other placement); when the Job ends in an interruption the policy rides out,
it records it (keyed by the Job's name, so a replay counts it once) and creates the next pair
itself, named ``<first Job>-r<N>`` (``utils.training_job``). Pure: no cluster, no Airflow.
"""

from __future__ import annotations

import json
from typing import Any

from airflow_gpu.triggers.pod_replacement import PodReplacement, placement_key
from airflow_gpu.utils.manifest_delta import apply
from airflow_gpu.utils.training_job import NAME_TOKEN, job_name, with_state


class JobReplacement(PodReplacement):
    """``PodReplacement`` whose workload is a training Job and its Service (``{"job": ..., "service": ...}``)."""

    def next_name(self) -> str:
        return job_name(self.first_name, self.run.submissions)

    def manifest(self, name: str) -> dict[str, Any]:
        """The Job and Service of the run's current placement, named, with the run's state and environment."""
        key = placement_key(self.run.placement.candidate, self.run.placement.capacity)
        if key not in self.deltas and key != self.base_key:
            raise KeyError(f"no Job was carried for placement {key}; carried: {sorted([self.base_key, *self.deltas])}")
        pair = self.base if key == self.base_key else apply(self.base, self.deltas[key])
        named = json.loads(json.dumps(pair).replace(NAME_TOKEN, name))
        return with_state(named, self.run.to_json(), self.run.environment(), self.base_container)
