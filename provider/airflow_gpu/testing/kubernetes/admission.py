"""The API server's LimitRanger and ResourceQuota admission, and the ResourceQuota controller.

A namespace with a ``ResourceQuota`` or a ``LimitRange`` refuses creates that a namespace without
them takes, and a Job's controller only records ``FailedCreate`` events when its pods are refused;
this module makes the emulator refuse as the API server does, worded as it words it.

* Pod defaulting (``SetDefaults_Pod``, before any admission): a container's ``requests`` default to
  its ``limits`` for every resource that has a limit and no request.
* LimitRanger (``plugin/pkg/admission/limitranger/admission.go``), on pods. Mutating: the
  ``default`` (limit) and ``defaultRequest`` of every ``Container`` item go to each container and
  init container that lacks them, noted in the ``kubernetes.io/limit-ranger`` annotation. Validating:
  ``min``, ``max`` and ``maxLimitRequestRatio`` of ``Container`` and ``Pod`` items; refused with
  ``pods "<name>" is forbidden: maximum nvidia.com/gpu usage per Container is 1, but limit is 2``
  (several at once as ``[a, b]``, ``utilerrors.NewAggregate``). A LimitRange is defaulted as
  ``SetDefaults_LimitRangeItem`` does when it is created: ``default`` from ``max``,
  ``defaultRequest`` from ``default`` then ``min``.
* ResourceQuota (``staging/.../admission/plugin/resourcequota/controller.go``, ``CheckRequest``;
  the evaluators of ``pkg/quota/v1/evaluator/core``). Pods: ``pods``, ``count/pods``, ``cpu``,
  ``memory``, ``ephemeral-storage``, their ``requests.``/``limits.`` forms, ``hugepages-*`` and
  extended resources, which only count as ``requests.<name>`` (``requests.nvidia.com/gpu``: a hard
  limit on ``nvidia.com/gpu`` is accepted and enforces nothing, as on a real cluster). A pod in a
  terminal phase, or deleted longer ago than its grace period, no longer counts (``QuotaV1Pod``);
  ``count/pods`` counts every stored pod. Services: ``services``, ``count/services``,
  ``services.loadbalancers``, ``services.nodeports``. Any other kind: ``count/<plural>.<group>``
  (``count/jobs.batch``) and the legacy names of ConfigMaps, Secrets and ResourceQuotas. A quota
  on ``cpu``/``memory`` (requests or limits) requires every container to state it (``failed quota:
  <name>: must specify limits.cpu for: a,b``). Over a hard limit: 403 ``exceeded quota: <name>,
  requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4, limited:
  requests.nvidia.com/gpu=4``. The ``Terminating``, ``NotTerminating``, ``BestEffort`` and
  ``NotBestEffort`` scopes are honoured; a quota with a ``scopeSelector`` (priority classes) is
  not emulated and enforces nothing.
* The ResourceQuota controller keeps each quota's ``status.hard`` (the spec's) and ``status.used``
  (what its evaluators count, only for the resources they know), which ``kubectl get quota``
  prints. Admission counts usage afresh instead of trusting ``status.used``: the real controller
  catches up within moments of a change, and the emulator's answer is that of a caught-up cluster.

Mutating admission runs before the registry names the object (an error then names a pod by its
``generateName``, ``extractResourceName``); validating admission after, so that a quota refusal of a
Job's pod names the pod the registry generated, as ``Error creating: pods "train-0-x7k2p" is
forbidden: exceeded quota: ...`` in the Job's ``FailedCreate`` event does.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any

from airflow_gpu.testing.kubernetes.job_pods import parse_time
from airflow_gpu.testing.kubernetes.objects import ApiError, invalid, invalid_value, now
from airflow_gpu.testing.kubernetes.store import RESOURCES, Obj, Store

LIMIT_RANGER_ANNOTATION = "kubernetes.io/limit-ranger"
DECIMAL_SI, BINARY_SI, DECIMAL_EXPONENT = "DecimalSI", "BinarySI", "DecimalExponent"
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(\d+(\.\d*)?|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
#: What ``resource.ParseQuantity``'s error quotes.
QUANTITY_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exponent: suffix for suffix, exponent in _DECIMAL.items()}

#: The resources the pod evaluator counts (``podResources``), besides prefixed and extended ones.
POD_RESOURCES = frozenset(
    {
        "count/pods", "pods", "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory",
        "requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage",
    }
)  # fmt: skip
#: A quota on these makes every container state them (``validationSet``; "it was a mistake").
MUST_SPECIFY = frozenset({"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"})
SERVICE_RESOURCES = frozenset({"services", "count/services", "services.loadbalancers", "services.nodeports"})
#: Object counts with a name older than ``count/``: ``generic.ObjectCountQuotaResourceNameFor`` aliases.
LEGACY_COUNTS = {"configmaps": "configmaps", "secrets": "secrets", "resourcequotas": "resourcequotas"}
#: Quota resource names without a slash that the ResourceQuota validation accepts
#: (``IsStandardQuotaResourceName``); one with a slash (``nvidia.com/gpu``) passes and counts nothing.
STANDARD_QUOTA_NAMES = POD_RESOURCES | SERVICE_RESOURCES | {
    "persistentvolumeclaims", "requests.storage", "replicationcontrollers", *LEGACY_COUNTS,
}  # fmt: skip


# --- quantities ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Quantity:
    """``resource.Quantity``: a number and the format its ``String()`` is written in."""

    value: Decimal
    format: str = DECIMAL_SI

    @classmethod
    def parse(cls, text: Any) -> Quantity:
        if isinstance(text, bool) or not isinstance(text, int | float | str):
            raise ValueError(f"not a quantity: {text!r}")
        match = _QUANTITY.match(str(text).strip())
        if match is None:
            raise ValueError(f"quantities must match the regular expression {QUANTITY_PATTERN!r}")
        number, suffix = Decimal(match["number"]), match["suffix"] or ""
        if suffix in _BINARY:
            return cls(number * (1 << _BINARY[suffix]), BINARY_SI)
        if suffix[:1] in ("e", "E") and suffix not in _DECIMAL:
            return cls(number * Decimal(10) ** int(suffix[1:]), DECIMAL_EXPONENT)
        return cls(number * Decimal(10) ** _DECIMAL[suffix], DECIMAL_SI)

    def __add__(self, other: Quantity) -> Quantity:
        """``Quantity.Add``: the receiver's format, or the other's when the receiver is zero."""
        return Quantity(self.value + other.value, other.format if self.value == 0 else self.format)

    def __str__(self) -> str:
        """``Quantity.String``: the canonical form (``1536Mi``, ``500m``, ``2k``, ``4``)."""
        value = (self.value * 10**9).to_integral_value(rounding=ROUND_CEILING) / 10**9
        if value == 0:
            return "0"
        whole = value == value.to_integral_value()
        if self.format == BINARY_SI and whole and abs(value) >= 1024:
            number = int(value)
            for suffix, shift in sorted(_BINARY.items(), key=lambda item: -item[1]):
                if number % (1 << shift) == 0:
                    return f"{number >> shift}{suffix}"
            return str(number)
        mantissa, exponent = int(value * 10**9), -9
        while mantissa % 10 == 0:
            mantissa, exponent = mantissa // 10, exponent + 1
        while exponent % 3:
            mantissa, exponent = mantissa * 10, exponent - 1
        if exponent > 18:
            mantissa, exponent = mantissa * 10 ** (exponent - 18), 18
        if self.format == DECIMAL_EXPONENT:
            return f"{mantissa}e{exponent}" if exponent else str(mantissa)
        return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"


Resources = dict[str, Quantity]
ONE, ZERO = Quantity(Decimal(1)), Quantity(Decimal(0))


def _parsed(values: Any) -> Resources:
    if not isinstance(values, dict):
        return {}
    parsed: Resources = {}
    for name, text in values.items():
        try:
            parsed[str(name)] = Quantity.parse(text)
        except ValueError:
            continue  # validation answers for a malformed quantity
    return parsed


def _add(total: Resources, more: Resources) -> Resources:
    result = dict(total)
    for name, amount in more.items():
        result[name] = result[name] + amount if name in result else amount
    return result


def pretty(resources: Resources) -> str:
    """``prettyPrint``: ``name=value`` sorted by name, comma separated."""
    return ",".join(f"{name}={resources[name]}" for name in sorted(resources))


def _aggregate(messages: list[str]) -> str:
    """``utilerrors.NewAggregate(...).Error()``: one message as it is, several de-duplicated in brackets."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def forbidden(plural: str, name: str, message: str) -> ApiError:
    """``admission.NewForbidden``: ``<resource> "<name>" is forbidden: <message>``."""
    group = RESOURCES[plural].group
    qualified = f"{plural}.{group}" if group else plural
    details: dict[str, Any] = {"name": name, "kind": plural, **({"group": group} if group else {})}
    return ApiError(403, "Forbidden", f'{qualified} "{name}" is forbidden: {message}', details)


def _name(obj: Obj) -> str:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("name") or metadata.get("generateName") or "Unknown")


# --- pod defaulting and LimitRanger -------------------------------------------------------


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for kind in ("containers", "initContainers") for c in spec.get(kind) or [] if isinstance(c, dict)]


def default_requests(pod: Obj) -> None:
    """``SetDefaults_Pod``: a limit without a request makes the request equal to the limit."""
    for container in _containers(pod.get("spec") or {}):
        resources = container.get("resources")
        if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
            continue
        requests = resources.get("requests")
        if requests is None:
            requests = {}
        if not isinstance(requests, dict):
            continue
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)
        if requests:
            resources["requests"] = requests


def default_limit_range(limit_range: Obj) -> None:
    """``SetDefaults_LimitRangeItem`` for ``Container`` items: ``default`` from ``max``,
    ``defaultRequest`` from ``default``, then from ``min``."""
    for item in (limit_range.get("spec") or {}).get("limits") or []:
        if not isinstance(item, dict) or item.get("type") != "Container":
            continue
        default = item.setdefault("default", {})
        request = item.setdefault("defaultRequest", {})
        for source, target in ((item.get("max"), default), (default, request), (item.get("min"), request)):
            for name, value in (source or {}).items():
                target.setdefault(name, value)
        for key in ("default", "defaultRequest"):
            if not item[key]:
                del item[key]


def _limit_items(store: Store, namespace: str, kind: str) -> list[dict[str, Any]]:
    items = []
    for limit_range in store.list("limitranges", namespace):
        items += [i for i in (limit_range.get("spec") or {}).get("limits") or [] if i.get("type") == kind]
    return items


def limit_ranger_admit(store: Store, namespace: str, pod: Obj) -> None:
    """LimitRanger's mutating half (``PodMutateLimitFunc``, one LimitRange after another)."""
    spec = pod.get("spec") or {}
    for limit_range in store.list("limitranges", namespace):
        items = [i for i in (limit_range.get("spec") or {}).get("limits") or [] if i.get("type") == "Container"]
        default_limits: dict[str, Any] = {}
        default_requests_: dict[str, Any] = {}
        for item in items:
            default_requests_.update(item.get("defaultRequest") or {})
            default_limits.update(item.get("default") or {})
        notes: list[str] = []
        for kind, label in (("containers", "container"), ("initContainers", "init container")):
            for container in spec.get(kind) or []:
                if not isinstance(container, dict):
                    continue
                resources = container.setdefault("resources", {})
                if not isinstance(resources, dict):
                    continue
                for key in ("limits", "requests"):
                    if resources.get(key) is None:
                        resources[key] = {}
                limits, requests = resources["limits"], resources["requests"]
                if not isinstance(limits, dict) or not isinstance(requests, dict):
                    continue
                set_limits = [k for k in default_limits if k not in limits]
                set_requests = [k for k in default_requests_ if k not in requests]
                limits.update({k: copy.deepcopy(default_limits[k]) for k in set_limits})
                requests.update({k: copy.deepcopy(default_requests_[k]) for k in set_requests})
                if set_requests:
                    notes.append(f"{', '.join(sorted(set_requests))} request for {label} {container.get('name')}")
                if set_limits:
                    notes.append(f"{', '.join(sorted(set_limits))} limit for {label} {container.get('name')}")
                for key in ("limits", "requests"):
                    if not resources[key]:
                        del resources[key]
        if notes:
            annotations = pod.setdefault("metadata", {}).setdefault("annotations", {})
            annotations[LIMIT_RANGER_ANNOTATION] = "LimitRanger plugin set: " + "; ".join(notes)


def _min(kind: str, name: str, enforced: Quantity, requests: Resources, limits: Resources) -> str | None:
    if name not in requests:
        return f"minimum {name} usage per {kind} is {enforced}.  No request is specified"
    if requests[name].value < enforced.value:
        return f"minimum {name} usage per {kind} is {enforced}, but request is {requests[name]}"
    if name in limits and limits[name].value < enforced.value:
        return f"minimum {name} usage per {kind} is {enforced}, but limit is {limits[name]}"
    return None


def _max(kind: str, name: str, enforced: Quantity, requests: Resources, limits: Resources) -> str | None:
    if name not in limits:
        return f"maximum {name} usage per {kind} is {enforced}.  No limit is specified"
    if limits[name].value > enforced.value:
        return f"maximum {name} usage per {kind} is {enforced}, but limit is {limits[name]}"
    if name in requests and requests[name].value > enforced.value:
        return f"maximum {name} usage per {kind} is {enforced}, but request is {requests[name]}"
    return None


def _ratio(kind: str, name: str, enforced: Quantity, requests: Resources, limits: Resources) -> str | None:
    prefix = f"{name} max limit to request ratio per {kind} is {enforced}"
    if name not in requests or requests[name].value == 0:
        return f"{prefix}, but no request is specified or request is 0"
    if name not in limits or limits[name].value == 0:
        return f"{prefix}, but no limit is specified or limit is 0"
    ratio = limits[name].value / requests[name].value
    return f"{prefix}, but provided ratio is {float(ratio):f}" if ratio > enforced.value else None


def _container_resources(container: dict[str, Any]) -> tuple[Resources, Resources]:
    resources = container.get("resources") or {}
    return _parsed(resources.get("requests")), _parsed(resources.get("limits"))


def pod_requests_limits(spec: dict[str, Any]) -> tuple[Resources, Resources]:
    """``resourcehelper.PodRequests``/``PodLimits``: containers summed, sidecars (restartable init
    containers) added, and each other init container's own amount when it is larger."""
    requests: Resources = {}
    limits: Resources = {}
    for container in spec.get("containers") or []:
        r, l_ = _container_resources(container)
        requests, limits = _add(requests, r), _add(limits, l_)
    for container in spec.get("initContainers") or []:
        r, l_ = _container_resources(container)
        if container.get("restartPolicy") == "Always":
            requests, limits = _add(requests, r), _add(limits, l_)
            continue
        for total, own in ((requests, r), (limits, l_)):
            for name, amount in own.items():
                if name not in total or amount.value > total[name].value:
                    total[name] = amount
    return requests, limits


def limit_ranger_validate(store: Store, namespace: str, pod: Obj) -> None:
    """LimitRanger's validating half (``PodValidateLimitFunc``); 403 naming every violation."""
    spec = pod.get("spec") or {}
    errors: list[str] = []
    checks = (("min", _min), ("max", _max), ("maxLimitRequestRatio", _ratio))
    for item in _limit_items(store, namespace, "Container"):
        for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            requests, limits = _container_resources(container)
            for key, check in checks:
                for name, enforced in _parsed(item.get(key)).items():
                    if (error := check("Container", name, enforced, requests, limits)) is not None:
                        errors.append(error)
    for item in _limit_items(store, namespace, "Pod"):
        requests, limits = pod_requests_limits(spec)
        for key, check in checks:
            for name, enforced in _parsed(item.get(key)).items():
                if (error := check("Pod", name, enforced, requests, limits)) is not None:
                    errors.append(error)
    if errors:
        raise forbidden("pods", _name(pod), _aggregate(errors))


# --- ResourceQuota --------------------------------------------------------------------------


def _extended_for_quota(name: str) -> bool:
    """``isExtendedResourceNameForQuota``: ``requests.<name>`` of a resource that is not native."""
    return name.startswith("requests.") and "/" in name and "kubernetes.io/" not in name


def matching(plural: str, names: list[str]) -> list[str]:
    """The evaluator's ``MatchingResources``: which of a quota's resource names count ``plural``."""
    if plural == "pods":
        return [
            n for n in names
            if n in POD_RESOURCES or n.startswith(("hugepages-", "requests.hugepages-")) or _extended_for_quota(n)
        ]  # fmt: skip
    if plural == "services":
        return [n for n in names if n in SERVICE_RESOURCES]
    group = RESOURCES[plural].group if plural in RESOURCES else ""
    counted = {f"count/{plural}.{group}" if group else f"count/{plural}"}
    if plural in LEGACY_COUNTS:
        counted.add(LEGACY_COUNTS[plural])
    return [n for n in names if n in counted]


def _pod_counts(pod: Obj) -> bool:
    """``QuotaV1Pod``: not terminal, and not deleted longer ago than its grace period."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    metadata = pod.get("metadata") or {}
    deleted, grace = parse_time(metadata.get("deletionTimestamp")), metadata.get("deletionGracePeriodSeconds")
    return not (deleted is not None and grace is not None and now() > deleted + timedelta(seconds=grace))


def _compute_usage(requests: Resources, limits: Resources) -> Resources:
    """``podComputeUsageHelper``."""
    usage: Resources = {"pods": ONE}
    for name in ("cpu", "memory", "ephemeral-storage"):
        if name in requests:
            usage[name] = usage[f"requests.{name}"] = requests[name]
        if name in limits:
            usage[f"limits.{name}"] = limits[name]
    for name, amount in requests.items():
        if name.startswith("hugepages-"):
            usage[name] = usage[f"requests.{name}"] = amount
        elif "/" in name and "kubernetes.io/" not in name:
            usage[f"requests.{name}"] = amount
    return usage


def usage(plural: str, obj: Obj) -> Resources:
    """What one object counts against a quota (``Usage``)."""
    if plural == "pods":
        counted: Resources = {"count/pods": ONE}
        if _pod_counts(obj):
            counted.update(_compute_usage(*pod_requests_limits(obj.get("spec") or {})))
        return counted
    group = RESOURCES[plural].group
    result: Resources = {f"count/{plural}.{group}" if group else f"count/{plural}": ONE}
    if plural in LEGACY_COUNTS:
        result[LEGACY_COUNTS[plural]] = ONE
    if plural == "services":
        spec = obj.get("spec") or {}
        result["services"] = ONE
        if spec.get("type") == "LoadBalancer":
            result["services.loadbalancers"] = ONE
        if spec.get("type") in ("LoadBalancer", "NodePort"):
            ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
            result["services.nodeports"] = Quantity(Decimal(len(ports)))
    return result


def _is_best_effort(pod: Obj) -> bool:
    return not any(
        (c.get("resources") or {}).get(key)
        for c in _containers(pod.get("spec") or {})
        for key in ("requests", "limits")
    )


def _scopes_match(quota: Obj, plural: str, obj: Obj) -> bool:
    """``spec.scopes`` (the pod scopes); a ``scopeSelector`` is not emulated: such a quota counts nothing."""
    spec = quota.get("spec") or {}
    if spec.get("scopeSelector"):
        return False
    for scope in spec.get("scopes") or []:
        if plural != "pods":
            return False
        terminating = (obj.get("spec") or {}).get("activeDeadlineSeconds") is not None
        if {
            "Terminating": terminating, "NotTerminating": not terminating,
            "BestEffort": _is_best_effort(obj), "NotBestEffort": not _is_best_effort(obj),
        }.get(scope) is not True:  # fmt: skip
            return False
    return True


def quota_hard(quota: Obj) -> Resources:
    return _parsed((quota.get("spec") or {}).get("hard"))


def used_by(store: Store, quota: Obj) -> Resources:
    """What the ResourceQuota controller counts for ``quota`` (``CalculateUsage``), zero where nothing counts."""
    hard = list(quota_hard(quota))
    namespace = quota["metadata"]["namespace"]
    used: Resources = {}
    for plural in ("pods", "services", *(p for p in RESOURCES if p not in ("pods", "services"))):
        resource = RESOURCES[plural]
        names = matching(plural, hard) if resource.namespaced else []
        if not names:
            continue
        for name in names:
            used.setdefault(name, ZERO)
        for obj in store.list(plural, namespace):
            if _scopes_match(quota, plural, obj):
                counted = usage(plural, obj)
                used = _add(used, {n: counted[n] for n in names if n in counted})
    return used


def check_quota(store: Store, plural: str, namespace: str, obj: Obj) -> None:
    """``CheckRequest`` for a create: 403 when ``obj`` would take a quota of the namespace over ``hard``."""
    quotas = [q for q in store.list("resourcequotas", namespace) if _scopes_match(q, plural, obj)]
    relevant = []
    for quota in quotas:
        names = matching(plural, list(quota_hard(quota)))
        if not names:
            continue
        if plural == "pods":  # ``Constraints``
            missing: dict[str, set[str]] = {}
            required = set(names) & MUST_SPECIFY
            for container in _containers(obj.get("spec") or {}):
                stated = set(_compute_usage(*_container_resources(container)))
                for name in required - stated:
                    missing.setdefault(name, set()).add(str(container.get("name")))
            if missing:
                detail = "; ".join(f"{n} for: {','.join(sorted(missing[n]))}" for n in sorted(missing))
                raise forbidden(plural, _name(obj), f"failed quota: {quota['metadata']['name']}: must specify {detail}")
        relevant.append((quota, names))
    requested_all = {n: q for n, q in usage(plural, obj).items() if q.value != 0}
    for quota, names in relevant:
        hard = quota_hard(quota)
        requested = {n: requested_all[n] for n in names if n in requested_all}
        if not requested:
            continue
        used = used_by(store, quota)
        exceeded = sorted(n for n in requested if (used.get(n, ZERO) + requested[n]).value > hard[n].value)
        if exceeded:
            message = "exceeded quota: {}, requested: {}, used: {}, limited: {}".format(
                quota["metadata"]["name"],
                pretty({n: requested[n] for n in exceeded}),
                pretty({n: used.get(n, ZERO) for n in exceeded}),
                pretty({n: hard[n] for n in exceeded}),
            )
            raise forbidden(plural, _name(obj), message)


def prepare_quota(quota: Obj) -> None:
    """The ResourceQuota registry on create: status cleared (the controller fills it), names checked
    (``validateResourceQuotaResourceName``), quantities non-negative."""
    quota["status"] = {}
    causes = []
    for name, value in ((quota.get("spec") or {}).get("hard") or {}).items():
        where = f"spec.hard[{name}]"
        if "/" not in name and name not in STANDARD_QUOTA_NAMES:
            causes.append(invalid_value(where, name, "must be a standard resource for quota"))
            continue
        try:
            amount = Quantity.parse(value)
        except ValueError as error:
            causes.append(invalid_value(where, value, str(error)))
            continue
        if amount.value < 0:
            causes.append(invalid_value(where, value, "must be greater than or equal to 0"))
    if causes:
        raise invalid("ResourceQuota", str((quota.get("metadata") or {}).get("name") or ""), causes)


class QuotaController:
    """Keeps ``status.hard`` and ``status.used`` of every ResourceQuota current (``syncResourceQuota``).

    It follows the store as the controller's informers do: a quota created or changed, or an object
    of a namespace with quotas created, changed or deleted, queues that namespace's quotas for a
    recount on the next loop turn. A namespace without quotas costs one set look-up per change.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._quota_namespaces: dict[str, int] = {}
        self._dirty: set[str] = set()
        self._scheduled = False
        store.subscribe(self._observe)

    def _observe(self, plural: str, event: str, obj: Obj) -> None:
        namespace = obj["metadata"].get("namespace") or ""
        if plural == "resourcequotas":
            if event == "ADDED":
                self._quota_namespaces[namespace] = self._quota_namespaces.get(namespace, 0) + 1
            elif event == "DELETED":
                self._quota_namespaces[namespace] = self._quota_namespaces.get(namespace, 1) - 1
                if self._quota_namespaces[namespace] <= 0:
                    del self._quota_namespaces[namespace]
                return
            status = obj.get("status") or {}
            if status.get("hard") == self._hard_text(obj) and "used" in status:
                return  # its own status write
        elif plural == "events" or namespace not in self._quota_namespaces:
            return
        self._dirty.add(namespace)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._sync)

    @staticmethod
    def _hard_text(quota: Obj) -> dict[str, str]:
        return {name: str(amount) for name, amount in quota_hard(quota).items()}

    def _sync(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, set()
        for namespace in sorted(dirty):
            for quota in self.store.list("resourcequotas", namespace):
                self.sync(quota)

    def sync(self, quota: Obj) -> None:
        status = {
            "hard": self._hard_text(quota),
            "used": {name: str(amount) for name, amount in used_by(self.store, quota).items()},
        }
        if quota.get("status") != status:
            quota["status"] = status
            self.store.update("resourcequotas", quota)


def admit_pod_mutating(store: Store, namespace: str, pod: Obj) -> None:
    """Defaulting and the mutating plugins, before the registry names and validates the pod."""
    default_requests(pod)
    limit_ranger_admit(store, namespace, pod)


def admit_validating(
    store: Store, plural: str, namespace: str, obj: Obj, webhooks: Callable[[], None] | None = None
) -> None:
    """The validating plugins, after naming and validation: LimitRanger (pods), the validating admission
    webhooks (``webhooks``, when given), then ResourceQuota, last in the API server's chain so that only
    what every other plugin admitted is counted."""
    if plural == "pods":
        limit_ranger_validate(store, namespace, obj)
    if webhooks is not None:
        webhooks()
    check_quota(store, plural, namespace, obj)
