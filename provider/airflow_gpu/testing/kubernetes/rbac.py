"""Who may do what: ServiceAccount tokens and the RBAC authorizer, as kube-apiserver runs them.

A request with a token from the TokenRequest API (``POST .../serviceaccounts/<name>/token``, what
``kubectl create token`` calls) is the ServiceAccount's: user ``system:serviceaccount:<ns>:<name>``
in groups ``system:serviceaccounts``, ``system:serviceaccounts:<ns>`` and ``system:authenticated``.
It is allowed what the Roles and ClusterRoles bound to it allow (k8s.io/kubernetes
``plugin/pkg/auth/authorizer/rbac``: ``RuleAllows``, ``ResourceMatches``, ``appliesTo``), else answered
403 in the API server's words (``responsewriters.forbiddenMessage`` in ``apierrors.NewForbidden``).
A token the emulator did not issue is 401.

Requests without a token, or with the emulator's kubeconfig token (``kubeconfig.ADMIN_TOKEN``), are
an administrator's (``system:masters``), as every test before this module assumed. Discovery, version,
health and OpenAPI paths are open to every authenticated user, as the default ClusterRoles
``system:discovery`` and ``system:public-info-viewer`` make them. Not emulated: aggregated
ClusterRoles (``aggregationRule``), the built-in ClusterRoles such as ``edit``, impersonation, and
token expiry.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from typing import Any

from airflow_gpu.testing.kubernetes.kubeconfig import ADMIN_TOKEN
from airflow_gpu.testing.kubernetes.objects import ApiError
from airflow_gpu.testing.kubernetes.store import Store

GROUP = "rbac.authorization.k8s.io"
PLURALS = frozenset({"roles", "rolebindings", "clusterroles", "clusterrolebindings"})
#: What every authenticated user may GET without a rule: discovery, version, health and OpenAPI.
PUBLIC_PATHS = ("/api", "/apis", "/version", "/healthz", "/readyz", "/livez", "/openapi")


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]

    @classmethod
    def service_account(cls, namespace: str, name: str) -> User:
        return cls(
            f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
        )


@dataclass(frozen=True)
class Attributes:
    """What the authorizer is asked (``authorizer.AttributesRecord``): a resource request, or a path."""

    verb: str
    resource: str = ""  # "" for a non-resource request
    group: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""


class Tokens:
    """The TokenRequest API's tokens, by value: who each one is."""

    def __init__(self) -> None:
        self._users: dict[str, User] = {}
        self._lock = threading.Lock()

    def issue(self, namespace: str, account: str) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._users[token] = User.service_account(namespace, account)
        return token

    def user(self, authorization: str | None) -> User | None:
        """The request's user; None for the administrator. 401 for a token not issued here."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or token.strip() == ADMIN_TOKEN:
            return None
        with self._lock:
            user = self._users.get(token.strip())
        if user is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return user


def _has(values: Any, wanted: str) -> bool:
    return isinstance(values, list) and ("*" in values or wanted in values)


def rule_allows(rule: dict[str, Any], request: Attributes) -> bool:
    """``RuleAllows``: verbs, then API groups, resources (``pods/log``, ``*``, ``*/log``) and names."""
    if not _has(rule.get("verbs"), request.verb):
        return False
    if not request.resource:
        urls = rule.get("nonResourceURLs") or []
        return any(u == "*" or u == request.path or (u.endswith("*") and request.path.startswith(u[:-1])) for u in urls)
    if not _has(rule.get("apiGroups"), request.group):
        return False
    combined = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
    resources = rule.get("resources") or []
    if not any(r in ("*", combined) or (request.subresource and r == f"*/{request.subresource}") for r in resources):
        return False
    names = rule.get("resourceNames") or []
    return not names or request.name in names


def _applies(subject: dict[str, Any], user: User, binding_namespace: str) -> bool:
    """``appliesToUser``: a ServiceAccount subject without a namespace is of the RoleBinding's."""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "ServiceAccount":
        return user.name == f"system:serviceaccount:{subject.get('namespace') or binding_namespace}:{name}"
    if kind == "User":
        return user.name == name
    return kind == "Group" and name in user.groups


def _role_rules(store: Store, binding: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    ref = binding.get("roleRef") or {}
    if ref.get("kind") == "ClusterRole":
        role = store.find("clusterroles", "", str(ref.get("name")))
    elif ref.get("kind") == "Role" and namespace:
        role = store.find("roles", namespace, str(ref.get("name")))
    else:
        role = None
    return list((role or {}).get("rules") or [])


def allowed(store: Store, user: User, request: Attributes) -> bool:
    """ClusterRoleBindings apply everywhere, RoleBindings in their namespace only."""
    if not request.resource and request.verb == "get" and request.path.startswith(PUBLIC_PATHS):
        return True
    bindings = [(b, "") for b in store.list("clusterrolebindings")]
    if request.namespace:
        bindings += [(b, request.namespace) for b in store.list("rolebindings", request.namespace)]
    for binding, namespace in bindings:
        if not any(_applies(s, user, namespace) for s in binding.get("subjects") or []):
            continue
        if any(rule_allows(rule, request) for rule in _role_rules(store, binding, namespace)):
            return True
    return False


def forbidden(user: User, request: Attributes) -> ApiError:
    """403 as kube-apiserver words it: ``pods "x" is forbidden: User "..." cannot get resource "pods/log"
    in API group "" in the namespace "ns"``."""
    if not request.resource:
        message = f'forbidden: User "{user.name}" cannot {request.verb} path "{request.path}"'
        return ApiError(403, "Forbidden", message, {})
    resource = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
    where = f'in the namespace "{request.namespace}"' if request.namespace else "at the cluster scope"
    why = f'User "{user.name}" cannot {request.verb} resource "{resource}" in API group "{request.group}" {where}'
    qualified = f"{request.resource}.{request.group}" if request.group else request.resource
    subject = f'{qualified} "{request.name}"' if request.name else qualified
    details: dict[str, Any] = {"name": request.name, "kind": request.resource}
    if request.group:
        details["group"] = request.group
    if not request.name:
        del details["name"]
    return ApiError(403, "Forbidden", f"{subject} is forbidden: {why}", details)


def authorize(store: Store, user: User | None, requests: list[Attributes]) -> None:
    """Raise the first request's 403 that ``user`` may not make (an administrator may make all)."""
    if user is None:
        return
    for request in requests:
        if not allowed(store, user, request):
            raise forbidden(user, request)
