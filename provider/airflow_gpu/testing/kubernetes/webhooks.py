"""Validating admission webhooks that deny pods: a cluster's policy engine (Gatekeeper, Kyverno, an in-house
webhook) refusing a create, worded as kube-apiserver words the denial.

A real webhook is an HTTPS service named in a ``ValidatingWebhookConfiguration``; what reaches the client is
only its answer, rewritten by the API server. The emulator keeps the answer and skips the service: a test
declares which pods a webhook denies and with what ``Status`` (``KubernetesEmulator.deny_pods``).

The wording is ``ToStatusErr`` (``staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/
statuserror.go``): the webhook's ``status.code`` (403 when it sets none; 400 or 422 are common), its
``reason`` or ``Forbidden`` (``InternalError`` for a 500), and the message ``pods "<name>" is forbidden:
admission webhook "<webhook>" denied the request: <its message>`` (``Internal error occurred: ...`` for a
500; ``... denied the request without explanation`` when it gives neither message nor reason), details
``{name, kind: pods}``. A Job's pod so denied shows the same words in the Job controller's ``FailedCreate``
event. The plugin runs after the other validating plugins but ResourceQuota (``AllOrderedPlugins``:
PodSecurity, ..., ValidatingAdmissionWebhook, ResourceQuota), on the named pod; of several denying webhooks
the first declared answers (the dispatcher calls them in parallel and returns the first error it receives).
Not emulated: the webhook service itself, ``failurePolicy`` (a webhook that cannot be reached),
``matchConditions``, warnings, and operations other than a pod's create.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu.testing.kubernetes.objects import ApiError
from airflow_gpu.testing.kubernetes.selectors import label_matcher
from airflow_gpu.testing.kubernetes.store import Obj


@dataclass(frozen=True)
class DenyingWebhook:
    """One webhook's denial of the pods it matches.

    ``selector`` is a label selector on the pod (``"!team"``: pods without a ``team`` label), as the
    configuration's ``objectSelector``; ``namespace`` limits it to one namespace (its ``namespaceSelector``
    on ``kubernetes.io/metadata.name``); neither given, it denies every pod.
    """

    webhook: str
    message: str = ""
    code: int = 403
    reason: str = ""
    selector: str | None = None
    namespace: str | None = None
    _matches: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.webhook:
            raise ValueError("a webhook needs a name (its configuration's webhooks[].name)")
        if not 400 <= self.code <= 599:
            raise ValueError(f"webhook {self.webhook!r}: code must be an HTTP error code (4xx or 5xx); got {self.code}")
        object.__setattr__(self, "_matches", label_matcher(self.selector))  # a bad selector fails here

    def matches(self, namespace: str, pod: Obj) -> bool:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return (self.namespace is None or self.namespace == namespace) and bool(self._matches(labels))

    def denial(self, pod: Obj) -> ApiError:
        """``ToStatusErr`` of this webhook's answer for ``pod``."""
        name = str((pod.get("metadata") or {}).get("name") or "") or "Unknown"
        denied_by = f'admission webhook "{self.webhook}" denied the request'
        if self.message:
            said = f"{denied_by}: {self.message}"
        elif self.reason:
            said = f"{denied_by}: {self.reason}"
        else:
            said = f"{denied_by} without explanation"
        if self.code == 500:
            return ApiError(500, self.reason or "InternalError", f"Internal error occurred: {said}",
                            {"causes": [{"message": said}]})  # fmt: skip
        details = {"name": name, "kind": "pods"}
        return ApiError(self.code, self.reason or "Forbidden", f'pods "{name}" is forbidden: {said}', details)


class Webhooks:
    """The declared denying webhooks; thread-safe, since tests declare them from outside the server's loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._webhooks: list[DenyingWebhook] = []

    def add(self, webhook: DenyingWebhook) -> DenyingWebhook:
        with self._lock:
            self._webhooks.append(webhook)
        return webhook

    def remove(self, name: str | None = None) -> None:
        """Forget the webhook of that name, or every one."""
        with self._lock:
            self._webhooks = [w for w in self._webhooks if name is not None and w.webhook != name]

    def admit_pod(self, namespace: str, pod: Obj) -> None:
        """Raise the first matching webhook's denial of ``pod`` (already named)."""
        with self._lock:
            webhooks = list(self._webhooks)
        for webhook in webhooks:
            if webhook.matches(namespace, pod):
                raise webhook.denial(pod)
