"""A validating admission webhook's denial, through the unmodified ``kubernetes`` client, as kube-apiserver
reports it (``staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/statuserror.go``,
``ToStatusErr``): the webhook's ``status.code`` (403 when it sets none), its reason or ``Forbidden``
(``InternalError`` for 500), the message ``pods "<name>" is forbidden: admission webhook "<webhook>" denied the
request: <its message>`` and details ``{name, kind: pods}``; the plugin runs after PodSecurity and before
ResourceQuota (``AllOrderedPlugins``); a Job's pods so denied show the words in ``FailedCreate``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.testing.kubernetes.conftest import pod_manifest, wait_for

WEBHOOK = "gpu-policy.example.com"
DENIED = f'admission webhook "{WEBHOOK}" denied the request: GPU pods need label team'


def denial(core: client.CoreV1Api, manifest: dict[str, Any], namespace: str = "default") -> tuple[int, dict]:
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(namespace, manifest)
    return refused.value.status, json.loads(refused.value.body)


def test_a_denied_pod_gets_the_webhooks_code_and_words_under_the_api_servers(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    kubernetes_emulator.deny_pods(WEBHOOK, "GPU pods need label team")
    code, status = denial(core, pod_manifest("train", ["true"]))
    assert code == 403
    assert status == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'pods "train" is forbidden: {DENIED}', "reason": "Forbidden",
        "details": {"name": "train", "kind": "pods"}, "code": 403,
    }  # fmt: skip
    assert core.list_namespaced_pod("default").items == []


@pytest.mark.parametrize(("code", "reason", "expected"), [(422, "", "Forbidden"), (400, "BadRequest", "BadRequest")])
def test_a_webhook_code_other_than_403_is_kept_with_its_reason_or_forbidden(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api, code: int, reason: str, expected: str
) -> None:
    kubernetes_emulator.deny_pods(WEBHOOK, "GPU pods need label team", code, reason=reason)
    answered, status = denial(core, pod_manifest("train", ["true"]))
    assert (answered, status["code"], status["reason"]) == (code, code, expected)
    assert status["message"] == f'pods "train" is forbidden: {DENIED}'


def test_a_denial_without_a_message_says_the_reason_or_without_explanation(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    kubernetes_emulator.deny_pods("quiet.example.com")
    assert denial(core, pod_manifest("a", ["true"]))[1]["message"] == (
        'pods "a" is forbidden: admission webhook "quiet.example.com" denied the request without explanation'
    )
    kubernetes_emulator.allow_pods()
    kubernetes_emulator.deny_pods("terse.example.com", reason="NotAllowed")
    status = denial(core, pod_manifest("b", ["true"]))[1]
    assert (status["reason"], status["message"]) == (
        "NotAllowed",
        'pods "b" is forbidden: admission webhook "terse.example.com" denied the request: NotAllowed',
    )


def test_a_500_denial_is_an_internal_error(kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api) -> None:
    kubernetes_emulator.deny_pods(WEBHOOK, "policy store unavailable", 500)
    code, status = denial(core, pod_manifest("train", ["true"]))
    said = f'admission webhook "{WEBHOOK}" denied the request: policy store unavailable'
    assert (code, status["reason"], status["message"]) == (500, "InternalError", f"Internal error occurred: {said}")
    assert status["details"] == {"causes": [{"message": said}]}


def test_only_matching_pods_are_denied_and_the_generated_name_is_quoted(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    core.create_namespace({"metadata": {"name": "open"}})
    kubernetes_emulator.deny_pods(WEBHOOK, "GPU pods need label team", selector="!team", namespace="default")
    assert core.create_namespaced_pod("default", pod_manifest("ok", ["true"], labels={"team": "ml"})).metadata.name
    assert core.create_namespaced_pod("open", pod_manifest("elsewhere", ["true"])).metadata.name == "elsewhere"
    manifest = pod_manifest("unused", ["true"])
    manifest["metadata"] = {"generateName": "train-", "labels": {"app": "x"}}
    message = denial(core, manifest)[1]["message"]
    assert message.startswith('pods "train-') and message.endswith(f'" is forbidden: {DENIED}')
    assert message != f'pods "train-" is forbidden: {DENIED}'  # validating admission sees the generated name
    kubernetes_emulator.allow_pods(WEBHOOK)
    assert core.create_namespaced_pod("default", pod_manifest("later", ["true"])).metadata.name == "later"


def test_pod_security_answers_before_the_webhook_and_the_webhook_before_resource_quota(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    core.create_namespace(
        {"metadata": {"name": "locked", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    wait_for(lambda: core.list_namespaced_service_account("locked").items)
    kubernetes_emulator.deny_pods(WEBHOOK, "GPU pods need label team")
    assert "violates PodSecurity" in denial(core, pod_manifest("a", ["true"]), "locked")[1]["message"]
    core.create_namespaced_resource_quota("default", {"metadata": {"name": "none"}, "spec": {"hard": {"pods": "0"}}})
    assert denial(core, pod_manifest("b", ["true"]))[1]["message"] == f'pods "b" is forbidden: {DENIED}'


def test_a_jobs_denied_pods_show_the_words_in_failed_create(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    kubernetes_emulator.deny_pods(WEBHOOK, "GPU pods need label team", 422)
    template = pod_manifest("unused", ["true"])
    template["metadata"] = {"labels": {"app": "train"}}
    batch.create_namespaced_job("default", {"metadata": {"name": "train"}, "spec": {"template": template}})

    def failed_create() -> list[str]:
        events = core.list_namespaced_event("default", field_selector="reason=FailedCreate").items
        return [e.message for e in events]

    (message, *_) = wait_for(failed_create)
    assert message.startswith('Error creating: pods "train-') and message.endswith(f'" is forbidden: {DENIED}')
    assert core.list_namespaced_pod("default").items == []


def test_a_bad_declaration_is_refused_when_made(kubernetes_emulator: KubernetesEmulator) -> None:
    with pytest.raises(ValueError, match="code must be an HTTP error code"):
        kubernetes_emulator.deny_pods(WEBHOOK, "x", 200)
    with pytest.raises(ValueError, match="unable to parse requirement"):
        kubernetes_emulator.deny_pods(WEBHOOK, "x", selector="team in")
