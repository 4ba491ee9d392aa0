"""``GPUBatchHook``: the amazon provider's ``BatchClientHook`` plus what a GPU job needs from Batch.

Three things the official hook does not do: register a job definition only when its content
changed (a DAG parsed every few seconds must not add a revision per run), describe many jobs in
one call (DescribeJobs takes 100 ids), and say which GPUs a queue can actually launch, so that a
job that would sit in RUNNABLE forever fails with "queue gpu-spot offers g5 (A10G) only" instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

try:
    from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError("GPUBatchHook needs the amazon provider: pip install 'airflow-provider-gpu[amazon]'") from error

from airflow_gpu.accelerators.batch import InstanceOffer, describe_offers, instance_offers
from airflow_gpu.accelerators.spec import Accelerator

#: Tag on a job definition revision: the hash of what was registered.
SPEC_HASH_TAG = "airflow-gpu/spec-hash"
DESCRIBE_JOBS_LIMIT = 100
SPOT_TYPES = frozenset({"SPOT", "FARGATE_SPOT"})


@dataclass(frozen=True)
class QueueOffer:
    """A job queue, whether its capacity is spot, and the accelerator instance types it launches."""

    name: str
    capacity: str  # "spot", "on-demand" or "mixed"
    offers: tuple[InstanceOffer, ...]

    def can_run(self, accelerator: Accelerator) -> bool:
        names = {v.memory_gb for v in accelerator.variants}
        return any(
            o.accelerator == accelerator.type
            and o.instance_type.accelerators >= accelerator.count
            and o.instance_type.memory_gb in names
            for o in self.offers
        )

    def describe(self) -> str:
        return f"queue {self.name} ({self.capacity}) offers {describe_offers(self.offers)}"


def definition_hash(definition: Mapping[str, Any]) -> str:
    """A stable hash of a job definition's content (sorted keys), for reuse across parses."""
    return hashlib.sha256(json.dumps(definition, sort_keys=True, default=str).encode()).hexdigest()[:16]


class GPUBatchHook(BatchClientHook):
    """``BatchClientHook`` with idempotent job definitions, batched describes and GPU queue offers."""

    @property
    def api(self) -> Any:
        """The boto3 Batch client (``client`` is typed as the provider's partial protocol)."""
        return self.client

    def register_job_definition_once(self, name: str, definition: Mapping[str, Any]) -> str:
        """The ARN of an active revision of ``name`` with exactly ``definition``, registering one if none.

        ``definition`` is RegisterJobDefinition's arguments without the name (type,
        containerProperties, retryStrategy, ...). Its hash goes in a tag, so a changed spec gets a
        new revision and an unchanged one reuses the active revision.
        """
        digest = definition_hash(definition)
        paginator = self.api.get_paginator("describe_job_definitions")
        for page in paginator.paginate(jobDefinitionName=name, status="ACTIVE"):
            for revision in page["jobDefinitions"]:
                if (revision.get("tags") or {}).get(SPEC_HASH_TAG) == digest:
                    return str(revision["jobDefinitionArn"])
        tags = {**(definition.get("tags") or {}), SPEC_HASH_TAG: digest}
        answer = self.api.register_job_definition(jobDefinitionName=name, **{**definition, "tags": tags})
        self.log.info("Registered job definition %s (spec %s)", answer["jobDefinitionArn"], digest)
        return str(answer["jobDefinitionArn"])

    def describe_jobs_batched(self, job_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """DescribeJobs for any number of ids, 100 per call; ids Batch no longer knows are absent."""
        ids = list(dict.fromkeys(job_ids))
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), DESCRIBE_JOBS_LIMIT):
            for job in self.api.describe_jobs(jobs=ids[start : start + DESCRIBE_JOBS_LIMIT])["jobs"]:
                found[job["jobId"]] = job
        return found

    def queue_offers(self, queue: str) -> QueueOffer:
        """Which capacity and accelerator instance types the queue's compute environments launch."""
        queues = self.api.describe_job_queues(jobQueues=[queue])["jobQueues"]
        if not queues:
            raise ValueError(f"job queue {queue!r} does not exist")
        arns = [entry["computeEnvironment"] for entry in queues[0]["computeEnvironmentOrder"]]
        environments = self.api.describe_compute_environments(computeEnvironments=arns)["computeEnvironments"]
        kinds = {(e.get("computeResources") or {}).get("type", "EC2") for e in environments}
        capacity = "spot" if kinds <= SPOT_TYPES else "on-demand" if not kinds & SPOT_TYPES else "mixed"
        types = [t for e in environments for t in (e.get("computeResources") or {}).get("instanceTypes") or []]
        return QueueOffer(queues[0]["jobQueueName"], capacity, instance_offers(types))
