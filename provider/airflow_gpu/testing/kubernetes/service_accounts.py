"""ServiceAccounts: the ``default`` account of every namespace and the admission check of pods.

The ServiceAccount controller (``pkg/controller/serviceaccount``) creates ``default`` in every
namespace and creates it again when it is deleted; the emulator does both. The ServiceAccount
admission plugin (``plugin/pkg/admission/serviceaccount/admission.go``, ``Admit``) defaults a pod's
``spec.serviceAccountName`` to ``default`` and refuses a pod whose account does not exist with
403 Forbidden, ``pods "<name>" is forbidden: error looking up service account <ns>/<sa>:
serviceaccount "<sa>" not found``. It runs before the registry generates a name, so a pod with
only ``generateName`` is named by its ``generateName`` in that message (``extractResourceName``).
Token volumes (``kube-api-access-*``) and image pull secrets of the account are not emulated.
"""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_gpu.testing.kubernetes.objects import ApiError
from airflow_gpu.testing.kubernetes.store import Obj, Store

DEFAULT_SERVICE_ACCOUNT = "default"


def forbidden_pod(name: str, namespace: str, account: str) -> ApiError:
    """``admission.NewForbidden`` wrapping the lookup's NotFound, worded as the plugin words it."""
    message = (
        f'pods "{name}" is forbidden: error looking up service account {namespace}/{account}: '
        f'serviceaccount "{account}" not found'
    )
    return ApiError(403, "Forbidden", message, {"name": name, "kind": "pods"})


def admit_pod(store: Store, namespace: str, pod: Obj) -> None:
    """Default the pod's service account and check that it exists (the plugin's ``Admit``).

    ``spec.serviceAccount`` is the deprecated name of the field: the v1 conversion takes it when
    ``serviceAccountName`` is empty, and writes ``serviceAccountName`` back into it on output.
    """
    spec: dict[str, Any] = pod["spec"]
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or DEFAULT_SERVICE_ACCOUNT
    metadata = pod.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    if not isinstance(account, str) or store.find("serviceaccounts", namespace, account) is None:
        name = metadata.get("name") or metadata.get("generateName") or "Unknown"
        raise forbidden_pod(str(name), namespace, str(account))
    spec["serviceAccountName"] = spec["serviceAccount"] = account


class ServiceAccountController:
    """Keeps a ``default`` ServiceAccount in every namespace, as the controller manager does."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.subscribe(self._observe)

    def ensure_default(self, namespace: str) -> None:
        """Create ``default`` in ``namespace`` unless it is there (or the namespace is gone or going)."""
        owner = self.store.find("namespaces", "", namespace)
        if owner is None or owner["metadata"].get("deletionTimestamp"):
            return
        if self.store.find("serviceaccounts", namespace, DEFAULT_SERVICE_ACCOUNT) is None:
            self.store.create("serviceaccounts", namespace, {"metadata": {"name": DEFAULT_SERVICE_ACCOUNT}})

    def _observe(self, plural: str, event: str, obj: Obj) -> None:
        """A listener only queues work: the store is not changed while it tells of a change."""
        metadata = obj["metadata"]
        if plural == "namespaces" and event == "ADDED":
            namespace = metadata["name"]
        elif plural == "serviceaccounts" and event == "DELETED" and metadata["name"] == DEFAULT_SERVICE_ACCOUNT:
            namespace = metadata["namespace"]
        else:
            return
        asyncio.get_running_loop().call_soon(self.ensure_default, namespace)
