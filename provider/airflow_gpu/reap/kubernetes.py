"""The provider's pods, training Jobs and Services on a cluster: listed, and deleted as the operators delete them.

Through the official ``kubernetes`` client, as the operators' hooks call it, with our API retry
(``utils.api_retry``: 429 with ``Retry-After``, 5xx, resets). Listing reads raw API dicts
(``resources`` reads labels and annotations by their API names) a page at a time.

Deletion is the operators' own: a pod with its ``terminationGracePeriodSeconds`` (what KPO sets
from, and deletes with, the operator's ``termination_grace_period``), so a training checkpoints as
it would on a normal cleanup; a training Job with ``propagationPolicy: Foreground`` (the API's
default for a ``batch/v1`` Job orphans its pods, which would train on) and its Service. Each
delete carries the uid that was judged as a precondition: an object made anew under the same name
since the listing (a retry's pod) answers 409 and is left alone.

Namespaces: those named, or every one, listed cluster-wide; credentials that may not list
cluster-wide (403) fall back to the namespaces they may list, one by one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from airflow_gpu.reap.resources import SELECTOR, Skipped, from_kubernetes
from airflow_gpu.reap.rules import Resource
from airflow_gpu.utils import api_retry
from airflow_gpu.utils.training_job import JOB_LABEL

#: How long one call is asked again while the API server throttles or fails.
BUDGET_SECONDS = 120.0
PAGE = 500


class KubernetesUnreachable(OSError):
    """The cluster could not be listed: nothing there is judged."""


class KubernetesResources:
    """Candidates on one cluster (``api_client``: a configured ``kubernetes.client.ApiClient``)."""

    backend = "kubernetes"

    def __init__(self, api_client: Any, namespaces: Sequence[str] = ()) -> None:
        from kubernetes.client import BatchV1Api, CoreV1Api

        self.core, self.batch = CoreV1Api(api_client), BatchV1Api(api_client)
        self.namespaces = list(dict.fromkeys(namespaces))
        self.where = api_client.configuration.host

    @classmethod
    def connect(
        cls, kubeconfig: str | None, context: str | None, namespaces: Sequence[str] = ()
    ) -> KubernetesResources:
        """From a kubeconfig (``None``: ``$KUBECONFIG`` or ``~/.kube/config``), or the pod's service
        account when run in a cluster (a CronJob) with no kubeconfig named."""
        import os

        from kubernetes import config

        try:
            if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
                configuration = _in_cluster()
                from kubernetes.client import ApiClient

                return cls(ApiClient(configuration), namespaces)
            return cls(config.new_client_from_config(config_file=kubeconfig, context=context), namespaces)
        except config.ConfigException as error:
            raise KubernetesUnreachable(f"no Kubernetes configuration: {error}") from None

    # --- listing ----------------------------------------------------------------------------

    def find(self) -> tuple[list[Resource], list[Skipped]]:
        found: list[Resource] = []
        skipped: list[Skipped] = []
        pods, jobs, services = (list(self._objects(plural)) for plural in ("pods", "jobs", "services"))
        job_names = {(j["metadata"].get("namespace"), j["metadata"].get("name")) for j in jobs}
        for kind, objects in (("pod", pods), ("job", jobs), ("service", services)):
            for obj in objects:
                namespace = obj["metadata"].get("namespace")
                names = frozenset(name for ns, name in job_names if ns == namespace)
                if kind == "service" and JOB_LABEL not in (obj["metadata"].get("labels") or {}):
                    continue
                candidate = from_kubernetes(kind, obj, names)
                if isinstance(candidate, Resource):
                    found.append(candidate)
                elif isinstance(candidate, Skipped):
                    skipped.append(candidate)
        return found, skipped

    def _objects(self, plural: str) -> Iterator[dict[str, Any]]:
        api = self.batch if plural == "jobs" else self.core
        singular = {"pods": "pod", "jobs": "job", "services": "service"}[plural]
        from kubernetes.client.exceptions import ApiException

        for namespace in self.namespaces:
            try:
                yield from self._pages(getattr(api, f"list_namespaced_{singular}"), plural, namespace)
            except ApiException as error:
                raise self._unreachable(f"listing {plural} in {namespace}", error) from None
        if self.namespaces:
            return
        try:
            yield from self._pages(getattr(api, f"list_{singular}_for_all_namespaces"), plural)
            return
        except ApiException as error:
            if error.status != 403:
                raise self._unreachable(f"listing {plural}", error) from None
        for namespace in self._readable_namespaces(plural):
            try:
                yield from self._pages(getattr(api, f"list_namespaced_{singular}"), plural, namespace)
            except ApiException as error:
                if error.status != 403:
                    raise self._unreachable(f"listing {plural} in {namespace}", error) from None

    def _readable_namespaces(self, plural: str) -> list[str]:
        from kubernetes.client.exceptions import ApiException

        try:
            return [n["metadata"]["name"] for n in self._pages(self.core.list_namespace, "namespaces")]
        except ApiException as error:
            raise KubernetesUnreachable(
                f"these credentials may list {plural} in no namespace they can name (HTTP {error.status} on "
                "namespaces): pass --namespace"
            ) from None

    def _pages(self, call: Callable[..., Any], what: str, *args: str) -> Iterator[dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException

        token: str | None = None
        while True:
            options: dict[str, Any] = {"limit": PAGE, "_preload_content": False}
            if what != "namespaces":
                options["label_selector"] = SELECTOR
            if token:
                options["_continue"] = token
            try:
                response = api_retry.call(partial(call, *args, **options), f"listing {what}", budget=BUDGET_SECONDS)
            except ApiException:
                raise  # the caller reads its status (403: another way to list)
            except Exception as error:  # refused, reset, timed out past the budget
                raise self._unreachable(f"listing {what}", error) from None
            page = json.loads(response.data)
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def _unreachable(self, what: str, error: BaseException) -> KubernetesUnreachable:
        return KubernetesUnreachable(f"Kubernetes API at {self.where}: {what} failed ({_why(error)})")

    # --- deleting ---------------------------------------------------------------------------

    def delete(self, resource: Resource) -> str:
        """Delete as the operator's own cleanup does; returns what was done."""
        from kubernetes.client import V1DeleteOptions, V1Preconditions
        from kubernetes.client.exceptions import ApiException

        name, namespace = resource.name, resource.scope
        preconditions = V1Preconditions(uid=resource.uid) if resource.uid else None
        try:
            if resource.kind == "pod":
                options = V1DeleteOptions(grace_period_seconds=resource.grace_seconds, preconditions=preconditions)
                if "being deleted" not in resource.status:
                    self._call(
                        lambda: self.core.delete_namespaced_pod(name, namespace, body=options), f"deleting pod {name}"
                    )
                if resource.held:
                    self._release(name, namespace, resource.uid)
                    return "released: " + ("its deletion ends" if "being deleted" in resource.status else "deleted")
                grace = (
                    "its own grace period" if resource.grace_seconds is None else f"{resource.grace_seconds} s grace"
                )
                return f"deleted ({grace})"
            if resource.kind == "job":
                options = V1DeleteOptions(propagation_policy="Foreground", preconditions=preconditions)
                self._call(
                    lambda: self.batch.delete_namespaced_job(name, namespace, body=options), f"deleting Job {name}"
                )
                machines = self._release_machines(name, namespace)  # first: they keep the Job in the API
                try:
                    service = " and its Service" if self._delete_service(name, namespace, None) else ""
                except Exception as error:  # the Job is deleted all the same; its Service is the next reap's
                    service = f"; its Service not deleted ({_why(error)}): reap again"
                return "deleted with its pods (Foreground)" + service + machines
            self._delete_service(name, namespace, preconditions)
            return "deleted"
        except ApiException as error:
            if error.status == 404:
                return "gone already"
            if error.status == 409:
                return "left: made anew since it was listed"
            return f"FAILED: HTTP {error.status} {error.reason}"
        except Exception as error:
            return f"FAILED: {_why(error)}"

    def _release_machines(self, job: str, namespace: str) -> str:
        """Let go of the held machines of a Job just deleted (``utils.end_hold``): they would keep it in the API.

        Returns what became of them, for the Job's action. The Job is deleted whatever happens here: a listing
        or a release that fails is reported beside it, not as the Job's failure, and the next reap finds the
        machines left held (ended training pods of a task no longer running are candidates of their own)."""
        from kubernetes.client.exceptions import ApiException

        from airflow_gpu.utils.end_hold import END_HOLD

        try:
            listed = self._call(lambda: self.core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={job}"),
                                f"listing the pods of Job {job}")  # fmt: skip
        except Exception as error:
            return f"; its machines not listed ({_why(error)}): reap again to let them go"
        held = [pod for pod in listed.items if END_HOLD in (pod.metadata.finalizers or [])]
        failed: list[str] = []
        for pod in held:
            try:
                self._release(pod.metadata.name, namespace, pod.metadata.uid)
            except ApiException as error:
                if error.status != 404:  # gone already: nothing holds it
                    failed.append(f"{pod.metadata.name} ({_why(error)})")
            except Exception as error:
                failed.append(f"{pod.metadata.name} ({_why(error)})")
        if failed:
            return f"; machines not let go: {', '.join(failed)}: reap again to let them go"
        return f"; {len(held)} held machine{'s' if len(held) != 1 else ''} let go" if held else ""

    def _release(self, name: str, namespace: str, uid: str | None) -> None:
        """Remove the provider's finalizer (``utils.end_hold``) from this very pod: a JSON patch that tests the
        uid and the finalizer's place first, so a pod made anew under the name, or a list changed meanwhile,
        is refused (422) rather than changed."""
        from airflow_gpu.utils.end_hold import END_HOLD

        pod = self._call(lambda: self.core.read_namespaced_pod(name, namespace), f"reading pod {name}")
        finalizers = list(pod.metadata.finalizers or [])
        if (uid and pod.metadata.uid != uid) or END_HOLD not in finalizers:
            return
        at = f"/metadata/finalizers/{finalizers.index(END_HOLD)}"
        patch = [
            {"op": "test", "path": "/metadata/uid", "value": pod.metadata.uid},
            {"op": "test", "path": at, "value": END_HOLD},
            {"op": "remove", "path": at},
        ]
        self._call(lambda: self.core.patch_namespaced_pod(name, namespace, patch), f"releasing pod {name}")

    def _delete_service(self, name: str, namespace: str, preconditions: Any) -> bool:
        from kubernetes.client import V1DeleteOptions
        from kubernetes.client.exceptions import ApiException

        options = V1DeleteOptions(preconditions=preconditions)
        try:
            self._call(
                lambda: self.core.delete_namespaced_service(name, namespace, body=options), f"deleting Service {name}"
            )
        except ApiException as error:
            if error.status == 404 and preconditions is None:
                return False
            raise
        return True

    @staticmethod
    def _call(fn: Callable[[], Any], what: str) -> Any:
        return api_retry.call(fn, what, budget=BUDGET_SECONDS)


def _why(error: BaseException) -> str:
    status = api_retry.status_of(error)
    if status:
        return f"HTTP {status} {getattr(error, 'reason', '')}".rstrip()
    return f"{type(error).__name__}: {error}"


def _in_cluster() -> Any:
    from kubernetes import config
    from kubernetes.client import Configuration

    configuration = Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return configuration
