"""The emulator's RBAC (``testing/kubernetes/rbac.py``) held to kube-apiserver's behaviour: ServiceAccount
tokens from the TokenRequest API, the RBAC authorizer's matching (k8s.io/kubernetes
``plugin/pkg/auth/authorizer/rbac``: verbs, apiGroups, ``resource/subresource``, ``*/subresource``,
resourceNames; RoleBindings only in their namespace, a ClusterRole bound by a RoleBinding only there),
and its 403 wording (``responsewriters.forbiddenMessage`` inside ``apierrors.NewForbidden``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.kubernetes.kubeconfig import kubeconfig_text
from airflow_gpu.testing.kubernetes.rbac import Attributes, rule_allows

USER = "system:serviceaccount:ml:runner"


def as_account(core: client.CoreV1Api, namespace: str = "ml", name: str = "runner") -> client.ApiClient:
    """A client that is the ServiceAccount, with a token from the TokenRequest API."""
    if namespace not in {n.metadata.name for n in core.list_namespace().items}:
        core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    token = core.create_namespaced_service_account_token(name, namespace, {"spec": {"audiences": []}})
    assert token.status.token
    return with_token(core, token.status.token)


def with_token(core: client.CoreV1Api, token: str) -> client.ApiClient:
    """A client from a kubeconfig whose user is ``token``, as a worker's kubeconfig is."""
    text = kubeconfig_text(core.api_client.configuration.host, token=token)
    return config.new_client_from_config_dict(yaml.safe_load(text))


def grant(core: client.CoreV1Api, namespace: str, rules: list[dict[str, Any]], *, cluster: bool = False) -> None:
    """A (Cluster)Role with ``rules`` bound to ml/runner by a RoleBinding in ``namespace`` (cluster: a
    ClusterRoleBinding)."""
    rbac = client.RbacAuthorizationV1Api(core.api_client)
    subjects = [{"kind": "ServiceAccount", "name": "runner", "namespace": "ml"}]
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "name": "r"}
    if cluster:
        rbac.create_cluster_role({"metadata": {"name": "r"}, "rules": rules})
        rbac.create_cluster_role_binding({"metadata": {"name": "b"}, "roleRef": {**role_ref, "kind": "ClusterRole"},
                                          "subjects": subjects})  # fmt: skip
    else:
        rbac.create_namespaced_role(namespace, {"metadata": {"name": "r"}, "rules": rules})
        rbac.create_namespaced_role_binding(
            namespace, {"metadata": {"name": "b"}, "roleRef": {**role_ref, "kind": "Role"}, "subjects": subjects}
        )


def refusal(error: ApiException) -> dict[str, Any]:
    assert error.status == 403, error
    status: dict[str, Any] = json.loads(error.body)
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Forbidden", 403)
    return status


@pytest.mark.parametrize(
    ("rule", "request_", "allowed"),
    [
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}, Attributes("get", "pods"), True),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}, Attributes("list", "pods"), False),
        # A subresource is its own resource: pods does not grant pods/log, pods/log does, and so does */log.
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}, Attributes("get", "pods", "", "log"), False),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}, Attributes("get", "pods", "", "log"), True),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}, Attributes("get", "pods", "", "log"), True),
        ({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}, Attributes("delete", "jobs", "batch"), True),
        # The API group counts: jobs in "" are not batch's.
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["jobs"]}, Attributes("get", "jobs", "batch"), False),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"], "resourceNames": ["a"]},
         Attributes("get", "nodes", name="a"), True),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"], "resourceNames": ["a"]},
         Attributes("get", "nodes", name="b"), False),
        ({"verbs": ["list"], "apiGroups": [""], "resources": ["nodes"], "resourceNames": ["a"]},
         Attributes("list", "nodes"), False),
        ({"verbs": ["get"], "nonResourceURLs": ["/metrics*"]}, Attributes("get", path="/metrics/x"), True),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["*"]}, Attributes("get", path="/metrics"), False),
    ],
)  # fmt: skip
def test_rule_matching_as_the_rbac_authorizer(rule: dict[str, Any], request_: Attributes, allowed: bool) -> None:
    assert rule_allows(rule, request_) is allowed


def test_a_service_account_may_do_only_what_its_role_allows_in_its_namespace(core: client.CoreV1Api) -> None:
    account = client.CoreV1Api(as_account(core))
    core.create_namespace({"metadata": {"name": "other"}})
    grant(core, "ml", [{"verbs": ["list", "get"], "apiGroups": [""], "resources": ["pods"]}])
    assert account.list_namespaced_pod("ml").items == []
    with pytest.raises(ApiException) as raised:
        account.list_namespaced_pod("other")
    status = refusal(raised.value)
    assert status["message"] == (
        f'pods is forbidden: User "{USER}" cannot list resource "pods" in API group "" in the namespace "other"'
    )
    assert status["details"] == {"kind": "pods"}
    with pytest.raises(ApiException) as raised:
        account.read_namespaced_pod_log("p", "ml")
    assert refusal(raised.value)["message"] == (
        f'pods "p" is forbidden: User "{USER}" cannot get resource "pods/log" in API group "" in the namespace "ml"'
    )
    with pytest.raises(ApiException) as raised:
        account.list_node()
    assert refusal(raised.value)["message"] == (
        f'nodes is forbidden: User "{USER}" cannot list resource "nodes" in API group "" at the cluster scope'
    )
    with pytest.raises(ApiException) as raised:
        client.BatchV1Api(account.api_client).delete_namespaced_job("j", "ml")
    status = refusal(raised.value)
    assert status["message"] == (
        f'jobs.batch "j" is forbidden: User "{USER}" cannot delete resource "jobs" in API group "batch" '
        'in the namespace "ml"'
    )
    assert status["details"] == {"name": "j", "group": "batch", "kind": "jobs"}


def test_a_cluster_role_binding_grants_cluster_scope_and_discovery_is_open(core: client.CoreV1Api) -> None:
    account = client.CoreV1Api(as_account(core))
    assert {r.name for r in account.get_api_resources().resources} >= {"pods", "nodes"}  # system:discovery
    grant(core, "", [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["nodes"]}], cluster=True)
    assert account.list_node().items
    with pytest.raises(ApiException) as raised:
        account.list_pod_for_all_namespaces()
    assert refusal(raised.value)["message"].endswith('cannot list resource "pods" in API group "" at the cluster scope')


def test_a_token_the_server_did_not_issue_is_unauthorized(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    with pytest.raises(ApiException) as raised:
        client.CoreV1Api(with_token(core, "made-up")).list_namespaced_pod("default")
    assert raised.value.status == 401 and json.loads(raised.value.body)["reason"] == "Unauthorized"
    with pytest.raises(ApiException) as raised:  # a token for an account that is not there
        core.create_namespaced_service_account_token("nobody", "default", {"spec": {"audiences": []}})
    assert raised.value.status == 404


def test_exec_over_a_websocket_needs_create_as_well_as_get(core: client.CoreV1Api) -> None:
    """kube-apiserver 1.31+ authorizes the WebSocket GET of pods/exec as ``create`` too."""
    from kubernetes.stream import stream

    account = client.CoreV1Api(as_account(core))

    def exec_refusal() -> str:
        # The stream client raises the handshake's status as an ApiException without a body, which the
        # generated client then fails to decode: what it says is in the exception's text either way.
        with pytest.raises(Exception) as raised:
            stream(account.connect_get_namespaced_pod_exec, "p", "ml", command=["true"], stdout=True)
        texts, error = [], raised.value
        while error is not None:
            texts.append(str(error))
            error = error.__context__
        return "\n".join(texts)

    grant(core, "ml", [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods/exec"]}])
    assert 'cannot create resource \\"pods/exec\\" in API group \\"\\" in the namespace \\"ml\\"' in exec_refusal()
    rules = [{"verbs": ["get", "create"], "apiGroups": [""], "resources": ["pods/exec"]}]
    role = {"metadata": {"name": "r"}, "rules": rules}
    client.RbacAuthorizationV1Api(core.api_client).replace_namespaced_role("r", "ml", role)
    assert 'pods \\"p\\" not found' in exec_refusal()  # authorized: the pod is looked up
