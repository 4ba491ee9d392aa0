"""The worker's calls on training Jobs and their Services: create (or adopt), delete, find a task's own.

``operators.accelerate_kubernetes`` runs a training over several machines as an Indexed Job and a
headless Service of the same name (``utils.training_job``). Here is what the worker does with
them through the API, kept apart from the training's loop:

* create the Service, then the Job (the machines look the main one up as they start), the Job
  becoming the Service's owner so that the garbage collector removes both together. A name that
  exists already is adopted when its labels name the same task try (the same try run again, or a
  trigger that created it), never when they name anything else, and never while it is being
  deleted: that one is waited out and created anew (``triggers.adoption``);
* delete both with ``propagationPolicy: Foreground`` (the API's default for a ``batch/v1`` Job
  orphans its pods) and wait until the Job and its pods are gone, so that the next Job's pods
  never run beside the last one's;
* find a task instance's Jobs and Services (a label search, as KPO finds its pod), for a new try
  after a worker crash: the one to take over, and the ones to delete;
* read the Job's ``FailedCreate`` events: what the API server said when it refused a rank.

Every read and delete rides out a throttled or restarting API server (``utils.api_retry``: 429
with ``Retry-After``, 5xx, a reset connection), so one bad answer during a days-long training does
not fail the task and leave its machines running.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from airflow_gpu.spot.training_job import failed_create_messages
from airflow_gpu.triggers import adoption
from airflow_gpu.utils import api_retry, end_hold
from airflow_gpu.utils.kubernetes import to_dict
from airflow_gpu.utils.training_job import DELETE_WAIT_SECONDS, JOB_LABEL, owned_by, owner_reference


class TrainingJobs:
    """Training Jobs and Services in one namespace, through the operator's (sync) client."""

    def __init__(self, core: Any, namespace: str, log: Any) -> None:
        self.core, self.namespace, self.log = core, namespace, log

    @property
    def batch(self) -> Any:
        from kubernetes.client import BatchV1Api

        return BatchV1Api(self.core.api_client)

    def read(self, name: str) -> dict[str, Any] | None:
        """The Job as an API dict; None once the API no longer has it."""
        from kubernetes.client.exceptions import ApiException

        try:
            job: dict[str, Any] = to_dict(
                api_retry.call(lambda: self.batch.read_namespaced_job(name, self.namespace), f"reading Job {name}",
                               log=self.log)
            )  # fmt: skip
        except ApiException as error:
            if error.status != 404:
                raise
            return None
        return job

    def pods(self, name: str) -> dict[str, dict[str, Any]]:
        """The Job's pods, by name, as API dicts."""
        listed = api_retry.call(
            lambda: self.core.list_namespaced_pod(self.namespace, label_selector=f"{JOB_LABEL}={name}"),
            f"listing the pods of Job {name}",
            log=self.log,
        )
        return {pod.metadata.name: to_dict(pod) for pod in listed.items}

    def failed_creates(self, name: str) -> list[str]:
        """The messages of the Job's ``FailedCreate`` events, oldest first ("Error creating: pods ... is
        forbidden: exceeded quota: ..."); empty when they cannot be read (no ``list events``)."""
        from kubernetes.client.exceptions import ApiException

        selector = f"involvedObject.kind=Job,involvedObject.name={name}"
        try:
            events = api_retry.call(
                lambda: self.core.list_namespaced_event(self.namespace, field_selector=selector),
                f"listing the events of Job {name}",
                log=self.log,
            ).items
        except ApiException as error:
            self.log.warning("The events of Job %s could not be read (%s %s)", name, error.status, error.reason)
            return []
        return failed_create_messages(to_dict(e) for e in events)

    def create(self, manifests: dict[str, dict[str, Any]]) -> bool:
        """The Service, then the Job; True when the Job existed already as this task try's (adopted)."""
        job, service = manifests["job"], manifests["service"]
        name = job["metadata"]["name"]
        self._create_or_adopt(service, self.core.create_namespaced_service, self.core.read_namespaced_service)
        try:
            adopted = self._create_or_adopt(job, self.batch.create_namespaced_job, self.batch.read_namespaced_job)
        except Exception:
            self.delete(name, wait=False)
            raise
        self._own(service)
        return adopted

    def _own(self, service: dict[str, Any]) -> None:
        """The Job of the Service's name becomes its owner, so that the garbage collector removes both together.

        A courtesy: the task deletes the Service itself, so a failed patch is a warning. A Service that is gone
        went with an earlier Job of its name that it was adopted with (being deleted): it is created again."""
        from kubernetes.client.exceptions import ApiException

        name = service["metadata"]["name"]
        job = self.read(name)
        if job is None:
            self.log.warning("Service %s was not given its Job as owner: the Job is gone", name)
            return
        owner = owner_reference(job)
        try:
            self.core.patch_namespaced_service(name, self.namespace, {"metadata": {"ownerReferences": [owner]}})
        except ApiException as error:
            if error.status != 404:
                self.log.warning("Service %s was not given its Job as owner (%s %s)", name, error.status, error.reason)
                return
            self.log.warning("Service %s went with an earlier Job of its name; creating it again", name)
            owned = owned_by(service, owner)
            self._create_or_adopt(owned, self.core.create_namespaced_service, self.core.read_namespaced_service)

    def _create_or_adopt(self, manifest: dict[str, Any], create: Any, read: Any) -> bool:
        """Create the object; True when one of its name was this task try's already (adopted). One being
        deleted is waited out and the object created anew; one of anything else's is an error (``adoption``)."""
        from kubernetes.client.exceptions import ApiException

        name = manifest["metadata"]["name"]
        conflict = adoption.NameConflict(manifest, self.log)
        while True:
            try:
                create(self.namespace, manifest)
                return False
            except ApiException as error:
                if error.status != 409:
                    raise
            existing = self._existing(read, name)
            if existing is None:  # gone between the create and the read: create again
                continue
            if conflict.adopts(existing):
                return True
            while conflict.holds(existing):
                if manifest.get("kind") == "Job":  # made anew: its held machines would keep it (Foreground)
                    self._release(name)
                time.sleep(adoption.GONE_POLL_SECONDS)
                existing = self._existing(read, name)

    def _existing(self, read: Any, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            found: dict[str, Any] = to_dict(read(name, self.namespace))
        except ApiException as error:
            if error.status != 404:
                raise
            return None
        return found

    def delete(self, name: str | None, wait: bool = True, grace_seconds: float = 30) -> None:
        """The Job and its pods (Foreground: the Job stays until its pods are gone), and the Service;
        with ``wait``, until the Job and its pods are gone (``DELETE_WAIT_SECONDS`` plus the grace period).

        Pods that outlive their Job were orphaned (someone deleted the Job with the API's default
        propagation for ``batch/v1``): they would train on, billed, so they are deleted too. The machines'
        end hold (``utils.end_hold``) is removed once the Job's deletion is asked: the provider is done
        with them, and a held pod would keep the Job (Foreground) in the API."""
        from kubernetes.client.exceptions import ApiException

        if name is None:
            return
        try:
            api_retry.call(
                lambda: self.batch.delete_namespaced_job(name, self.namespace, propagation_policy="Foreground"),
                f"deleting Job {name}",
                log=self.log,
            )
            self._release(name)  # only once the Job is going: a Job that stays keeps its machines' hold
        except ApiException as error:
            if error.status == 404:
                self._release(name)  # gone already, its machines may not be
        with contextlib.suppress(ApiException):
            api_retry.call(
                lambda: self.core.delete_namespaced_service(name, self.namespace), f"deleting Service {name}",
                log=self.log,
            )  # fmt: skip
        deadline = time.monotonic() + DELETE_WAIT_SECONDS + grace_seconds
        orphans_deleted = False
        while wait and time.monotonic() < deadline:
            left = self.pods(name)
            if self.read(name) is None:
                if not left:
                    return
                for pod in set(left) if not orphans_deleted else ():
                    self.log.warning("Deleting pod %s, which its deleted training Job %s left running", pod, name)
                    with contextlib.suppress(ApiException):
                        self.core.delete_namespaced_pod(pod, self.namespace)
                orphans_deleted = True
            self._release(name, left)  # a machine the controller made after the first look
            time.sleep(0.5)

    def _release(self, name: str, pods: dict[str, dict[str, Any]] | None = None) -> None:
        """Let go of the Job's held machines (``end_hold``); a failure costs the hold only (``airflow-gpu reap``)."""
        try:
            found = self.pods(name) if pods is None else pods
        except Exception as error:
            self.log.warning("Could not list the machines of Job %s to let them go (%s)", name, error)
            return
        for pod_name, pod in found.items():
            if end_hold.held(pod):
                end_hold.release_quietly(self.core, pod_name, self.namespace, self.log)

    def of_task(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        """A task instance's training Jobs and Services (``labels``: KPO's, without the try number), as
        API dicts: each try's, whatever made them (a worker, a trigger)."""
        selector = ",".join([*(f"{k}={v}" for k, v in labels.items()), JOB_LABEL])
        jobs = self.batch.list_namespaced_job(self.namespace, label_selector=selector).items
        services = self.core.list_namespaced_service(self.namespace, label_selector=selector).items
        return [{**to_dict(o), "kind": kind} for kind, found in (("Job", jobs), ("Service", services)) for o in found]
