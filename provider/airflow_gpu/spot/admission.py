"""The API server's refusal to create a pod (ResourceQuota, LimitRange, PodSecurity, a webhook), read once.

A single pod's create is refused with 403 ``Forbidden`` and a ``Status`` whose message is the admission
plugin's (``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go``: ``pods "x" is
forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=8, used: ..., limited: ...``; the
LimitRanger: ``maximum nvidia.com/gpu usage per Container is 1, but limit is 2``); a training Job's rank
shows the same words in the Job controller's ``FailedCreate`` event ("Error creating: ..."). Both are read
here, into one ``Classification`` the spot policy decides on: not a preemption and not a capacity shortage
(no other accelerator or capacity changes a namespace's quota or policy), so no spot budget is spent and
nothing is resubmitted; Airflow's retries may run, since a quota others hold can free up.

Pure: no Airflow, no client.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from airflow_gpu.spot.classifier import Classification, Outcome

#: ``Classification.reason`` of a pod the API server refused to create (the training Job's is the Job
#: controller's event reason, ``FailedCreate``); ``policy.REFUSALS`` words both as a refusal.
REFUSED = "AdmissionRefused"
QUOTA = re.compile(r"(?:exceeded|failed) quota: (?P<quota>[^,:\s]+)")
RBAC = re.compile(r"cannot create resource")
LIMIT_RANGE = re.compile(r"(?:maximum|minimum) \S+ usage per (?:Container|Pod) is|\S+ max limit to request ratio")
#: A validating admission webhook's denial, as kube-apiserver rewrites it (``webhook/errors/statuserror.go``,
#: ``ToStatusErr``): ``pods "x" is forbidden: admission webhook "gpu-policy.example.com" denied the request: ...``.
WEBHOOK = re.compile(r'admission webhook "(?P<webhook>[^"]+)" denied the request')
#: ``k8s.io/pod-security-admission`` (``admission/admission.go``): ``violates PodSecurity "restricted:latest": ...``.
POD_SECURITY = re.compile(r'violates PodSecurity "(?P<level>[a-z]+):[^"]*"')
#: What ``restricted`` requires of a pod that sets nothing (``policy/check_*.go``), as the operators' KPO
#: arguments take it: the pod's ``securityContext`` and every container's.
RESTRICTED_CONTEXTS = (
    "security_context={'runAsNonRoot': True, 'runAsUser': <non-zero>, 'seccompProfile': {'type': "
    "'RuntimeDefault'}} and container_security_context={'allowPrivilegeEscalation': False, 'capabilities': "
    "{'drop': ['ALL']}}"
)


@dataclass(frozen=True)
class Refusal:
    """What the API server said, and what it names."""

    message: str  # its words, as it wrote them
    namespace: str | None
    quota: str | None  # the ResourceQuota that refused, if one did

    def what_to_do(self) -> str:
        """The step that lets the pod in, for the task's one line."""
        where = f" -n {self.namespace}" if self.namespace else ""
        if self.quota:
            return (f"raise ResourceQuota {self.quota} (kubectl describe resourcequota {self.quota}{where}), request "
                    "less, or wait until the pods using it end")  # fmt: skip
        if RBAC.search(self.message):
            return f"grant the task's service account the right to create pods{where.replace(' -n', ' in namespace')}"
        if LIMIT_RANGE.search(self.message):
            return f"fit its requests and limits to the LimitRange (kubectl describe limitrange{where})"
        if found := POD_SECURITY.search(self.message):
            return self._pod_security(found.group("level"), where)
        if found := WEBHOOK.search(self.message):
            return (f"change the pod to meet the policy of admission webhook \"{found.group('webhook')}\" (its "
                    "words above), or ask the cluster's administrators about it (kubectl get "
                    "validatingwebhookconfigurations)")  # fmt: skip
        return "ask the cluster's administrators about the admission policy or webhook that refused it"

    def _pod_security(self, level: str, where: str) -> str:
        """The namespace's ``pod-security.kubernetes.io/enforce`` level refused the pod: the operator's
        arguments that meet it (``restricted``), or the fields to drop (``baseline`` forbids privileged,
        host namespaces, hostPath volumes, host ports and added capabilities, never asks for a field)."""
        label = f"kubectl get namespace{where.replace(' -n', '')} --show-labels"
        if level == "restricted":
            return (f"set the operator's {RESTRICTED_CONTEXTS}, as PodSecurity \"restricted\" requires of every "
                    f"container, or run it in a namespace whose pod-security.kubernetes.io/enforce level admits it "
                    f"({label})")  # fmt: skip
        return (f"remove from the pod what PodSecurity \"{level}\" forbids (the fields named above), or run it in a "
                f"namespace whose pod-security.kubernetes.io/enforce level admits it ({label})")  # fmt: skip


def refused(status: int | None, message: str | None) -> bool:
    """Whether a create's error is an admission refusal. Every built-in plugin refuses with 403 ``Forbidden``;
    a webhook's denial carries the webhook's own ``status.code`` (400 and 422 are common) under the API
    server's words, so a 4xx that says a webhook denied it is one too. A 500 is not: an API server that
    failed, or a webhook it could not call (``failed calling webhook``), may answer otherwise on a retry."""
    if status == 403:
        return True
    return status is not None and 400 <= status < 500 and bool(WEBHOOK.search(message or ""))


def status_message(body: str | bytes | None) -> str | None:
    """The ``message`` of a ``Status`` body (an ``ApiException``'s); None when it is not one."""
    try:
        status = json.loads(body or "")
    except (TypeError, ValueError):
        return None
    message = status.get("message") if isinstance(status, dict) else None
    return str(message) if message else None


def read(message: str, namespace: str | None) -> Refusal:
    """The refusal the API server's ``message`` states (a ``Status`` message or a ``FailedCreate`` event's)."""
    found = QUOTA.search(message)
    return Refusal(message.strip(), namespace, found.group("quota") if found else None)


def refused_pod(refusal: Refusal) -> Classification:
    """A single pod the API server would not create: one line that quotes it, names the namespace and the
    quota, and says what to do."""
    where = f" in namespace {refusal.namespace}" if refusal.namespace else ""
    by = f" (ResourceQuota {refusal.quota})" if refusal.quota else ""
    return Classification(
        Outcome.INFRASTRUCTURE,
        REFUSED,
        f"the API server refused to create the pod{where}{by}: {refusal.message}; {refusal.what_to_do()}",
    )
