"""PodSecurity admission as ``k8s.io/pod-security-admission`` refuses pods: the messages are the ones its
checks build (``policy/check_allowPrivilegeEscalation.go``, ``check_capabilities_restricted.go``,
``check_runAsNonRoot.go``, ``check_seccompProfile_restricted.go``, ``check_privileged.go``,
``check_hostPathVolumes.go``) under ``violates PodSecurity "<level>:<version>": ``, in ``policy/registry.go``'s
order (baseline's checks first; those a restricted check covers, ``Overlap``, only at baseline); a
Job's pods refused so show in ``FailedCreate``."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.testing.kubernetes.conftest import pod_manifest, wait_for

RESTRICTED_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def namespace(core: client.CoreV1Api, name: str, level: str) -> None:
    labels = {"pod-security.kubernetes.io/enforce": level}
    core.create_namespace({"metadata": {"name": name, "labels": labels}})
    wait_for(lambda: core.list_namespaced_service_account(name).items)


def refusal(core: client.CoreV1Api, ns: str, manifest: dict) -> str:
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(ns, manifest)
    assert refused.value.status == 403
    status = json.loads(refused.value.body)
    assert status["reason"] == "Forbidden"
    return str(status["message"])


def test_restricted_refuses_a_plain_pod_naming_each_check(core: client.CoreV1Api) -> None:
    namespace(core, "locked", "restricted")
    message = refusal(core, "locked", pod_manifest("x", ["true"]))
    assert message == (
        'pods "x" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
        '(container "base" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
        '(container "base" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or '
        'container "base" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "base" '
        'must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    )
    created = core.create_namespaced_pod(
        "locked", pod_manifest("ok", ["true"], container={"securityContext": RESTRICTED_CONTEXT})
    )
    assert created.metadata.name == "ok"


def test_restricted_runs_the_baseline_checks_first(core: client.CoreV1Api) -> None:
    namespace(core, "locked", "restricted")
    context = {**RESTRICTED_CONTEXT, "privileged": True, "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}
    manifest = pod_manifest("x", ["true"], container={"securityContext": context})
    manifest["spec"]["volumes"] = [{"name": "host", "hostPath": {"path": "/tmp"}}]
    message = refusal(core, "locked", manifest)
    assert message == (
        'pods "x" is forbidden: violates PodSecurity "restricted:latest": hostPath volumes (volume "host"), '
        'privileged (container "base" must not set securityContext.privileged=true), unrestricted capabilities '
        '(container "base" must not include "SYS_ADMIN" in securityContext.capabilities.add), restricted volume '
        'types (volume "host" uses restricted volume type "hostPath")'
    )


def test_baseline_takes_a_plain_pod_and_refuses_a_privileged_one(core: client.CoreV1Api) -> None:
    namespace(core, "shared", "baseline")
    assert core.create_namespaced_pod("shared", pod_manifest("plain", ["true"])).metadata.name == "plain"
    manifest = pod_manifest("root", ["true"], container={"securityContext": {"privileged": True}}, hostNetwork=True)
    assert refusal(core, "shared", manifest) == (
        'pods "root" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), '
        'privileged (container "base" must not set securityContext.privileged=true)'
    )
    context = {"capabilities": {"add": ["SYS_ADMIN", "CHOWN"]}, "seccompProfile": {"type": "Unconfined"}}
    assert refusal(core, "shared", pod_manifest("caps", ["true"], container={"securityContext": context})) == (
        'pods "caps" is forbidden: violates PodSecurity "baseline:latest": non-default capabilities (container '
        '"base" must not include "SYS_ADMIN" in securityContext.capabilities.add), seccompProfile (container '
        '"base" must not set securityContext.seccompProfile.type to "Unconfined")'
    )


def test_a_jobs_refused_pods_show_in_failed_create(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    namespace(core, "locked", "restricted")
    template = pod_manifest("unused", ["true"])
    template["metadata"] = {"labels": {"app": "train"}}
    batch.create_namespaced_job("locked", {"metadata": {"name": "train"}, "spec": {"template": template}})

    def failed_create() -> list[str]:
        events = core.list_namespaced_event("locked", field_selector="reason=FailedCreate").items
        return [e.message for e in events]

    (message, *_) = wait_for(failed_create)
    assert (
        message.startswith('Error creating: pods "train-') and 'violates PodSecurity "restricted:latest": ' in message
    )
    assert not core.list_namespaced_pod("locked").items


def test_labels_the_plugin_cannot_parse_fail_closed(core: client.CoreV1Api) -> None:
    """``api.PolicyToEvaluate``: an enforce level that is not privileged, baseline or restricted is evaluated
    as restricted (``ParseLevel``), an enforce version that is not ``latest`` or ``v1.<minor>`` as latest
    (``ParseVersion``): a misspelt label never admits what a restricted namespace refuses."""
    labels = {"pod-security.kubernetes.io/enforce": "Restricted", "pod-security.kubernetes.io/enforce-version": "1.29"}
    core.create_namespace({"metadata": {"name": "misspelt", "labels": labels}})
    wait_for(lambda: core.list_namespaced_service_account("misspelt").items)
    message = refusal(core, "misspelt", pod_manifest("x", ["true"]))
    assert message.startswith(
        'pods "x" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation'
    )
