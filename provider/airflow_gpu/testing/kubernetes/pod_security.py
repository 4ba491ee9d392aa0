"""PodSecurity admission: a namespace labelled ``pod-security.kubernetes.io/enforce`` refuses pods
that violate its level, worded as the API server words it.

From ``k8s.io/pod-security-admission`` (``policy/check_*.go``, ``admission/admission.go``): the
namespace's ``enforce`` label names the level (``privileged``, ``baseline``, ``restricted``),
``enforce-version`` the version (``latest`` when absent); labels ``api.PolicyToEvaluate`` cannot
parse fail closed as there: an unknown level is ``restricted``, an unknown version ``latest``.
``restricted`` runs the baseline checks then its own (``policy/registry.go``), and the refusal is 403 ``pods
"<name>" is forbidden: violates PodSecurity "restricted:latest": <reason> (<detail>), ...``. The
checks emulated are those a GPU pod meets: baseline ``capabilities_baseline``, ``hostNamespaces``,
``hostPathVolumes``, ``hostPorts``, ``privileged``, ``seccompProfile_baseline``; restricted
``allowPrivilegeEscalation``, ``capabilities_restricted``, ``restrictedVolumes``, ``runAsNonRoot``,
``runAsUser``, ``seccompProfile_restricted``. Not emulated: AppArmor, SELinux, procMount, sysctls,
Windows host processes, the user-namespace relaxation, ``audit``/``warn`` modes and exemptions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from airflow_gpu.testing.kubernetes.objects import ApiError
from airflow_gpu.testing.kubernetes.store import Obj, Store

ENFORCE = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION = "pod-security.kubernetes.io/enforce-version"
LEVELS = ("privileged", "baseline", "restricted")
BASELINE_CAPABILITIES = frozenset(
    {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
     "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
)  # fmt: skip
RESTRICTED_VOLUME_SOURCES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
Result = tuple[str, str] | None  # (ForbiddenReason, ForbiddenDetail), or allowed


def _plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _quote(names: list[str]) -> str:
    return ", ".join(f'"{name}"' for name in names)


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``visitContainers``: init containers, containers, ephemeral containers."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from (c for c in spec.get(key) or [] if isinstance(c, dict))


def _context(container: dict[str, Any]) -> dict[str, Any]:
    return container.get("securityContext") or {}


def _named(names: list[str]) -> str:
    return f"{_plural('container', 'containers', len(names))} {_quote(names)}"


def _capabilities(spec: dict[str, Any], allowed: frozenset[str]) -> tuple[list[str], list[str]]:
    adding, forbidden = [], set()
    for c in _containers(spec):
        bad = [cap for cap in (_context(c).get("capabilities") or {}).get("add") or [] if cap not in allowed]
        if bad:
            adding.append(c["name"])
            forbidden.update(bad)
    return adding, sorted(forbidden)


def capabilities_baseline(spec: dict[str, Any]) -> Result:
    adding, forbidden = _capabilities(spec, BASELINE_CAPABILITIES)
    if adding:
        detail = f"{_named(adding)} must not include {_quote(forbidden)} in securityContext.capabilities.add"
        return "non-default capabilities", detail
    return None


def host_namespaces(spec: dict[str, Any]) -> Result:
    used = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    return ("host namespaces", ", ".join(used)) if used else None


def host_path_volumes(spec: dict[str, Any]) -> Result:
    names = [v["name"] for v in spec.get("volumes") or [] if isinstance(v, dict) and "hostPath" in v]
    return ("hostPath volumes", f"{_plural('volume', 'volumes', len(names))} {_quote(names)}") if names else None


def host_ports(spec: dict[str, Any]) -> Result:
    containers, ports = [], []
    for c in _containers(spec):
        used = [str(p["hostPort"]) for p in c.get("ports") or [] if isinstance(p, dict) and p.get("hostPort")]
        if used:
            containers.append(c["name"])
            ports.extend(used)
    if not containers:
        return None
    verb = _plural("uses hostPort", "use hostPorts", len(ports))
    return "hostPort", f"{_named(containers)} {verb} {', '.join(ports)}"


def privileged(spec: dict[str, Any]) -> Result:
    names = [c["name"] for c in _containers(spec) if _context(c).get("privileged") is True]
    return ("privileged", f"{_named(names)} must not set securityContext.privileged=true") if names else None


def _seccomp_type(context: dict[str, Any]) -> str | None:
    profile = context.get("seccompProfile")
    return profile.get("type") if isinstance(profile, dict) else None


def seccomp_baseline(spec: dict[str, Any]) -> Result:
    setters = ["pod"] if _seccomp_type(spec.get("securityContext") or {}) == "Unconfined" else []
    names = [c["name"] for c in _containers(spec) if _seccomp_type(_context(c)) == "Unconfined"]
    if names:
        setters.append(_named(names))
    if setters:
        return (
            "seccompProfile",
            f'{" and ".join(setters)} must not set securityContext.seccompProfile.type to "Unconfined"',
        )
    return None


def allow_privilege_escalation(spec: dict[str, Any]) -> Result:
    names = [c["name"] for c in _containers(spec) if _context(c).get("allowPrivilegeEscalation") is not False]
    if names:
        return (
            "allowPrivilegeEscalation != false",
            f"{_named(names)} must set securityContext.allowPrivilegeEscalation=false",
        )
    return None


def capabilities_restricted(spec: dict[str, Any]) -> Result:
    missing = [
        c["name"] for c in _containers(spec) if "ALL" not in ((_context(c).get("capabilities") or {}).get("drop") or [])
    ]
    adding, forbidden = _capabilities(spec, frozenset({"NET_BIND_SERVICE"}))
    details = []
    if missing:
        details.append(f'{_named(missing)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(f"{_named(adding)} must not include {_quote(forbidden)} in securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def restricted_volumes(spec: dict[str, Any]) -> Result:
    names, kinds = [], set()
    for volume in spec.get("volumes") or []:
        sources = [k for k in volume if k != "name"] if isinstance(volume, dict) else []
        bad = [k for k in sources if k not in RESTRICTED_VOLUME_SOURCES]
        if bad:
            names.append(volume["name"])
            kinds.update(bad)
    if not names:
        return None
    detail = (
        f"{_plural('volume', 'volumes', len(names))} {_quote(names)} {_plural('uses', 'use', len(names))} "
        f"{_plural('restricted volume type', 'restricted volume types', len(kinds))} {_quote(sorted(kinds))}"
    )
    return "restricted volume types", detail


def _pod_or_containers(
    spec: dict[str, Any], read: Callable[[dict[str, Any]], Any], good: Any
) -> tuple[list[str], list[str], bool]:
    """(explicit bad setters, containers that set nothing, pod-level set to a good value)."""
    pod_value = read(spec.get("securityContext") or {})
    setters = ["pod"] if pod_value is not None and not good(pod_value) else []
    pod_ok = pod_value is not None and good(pod_value)
    explicit, implicit = [], []
    for c in _containers(spec):
        value = read(_context(c))
        if value is not None and not good(value):
            explicit.append(c["name"])
        elif value is None and not pod_ok:
            implicit.append(c["name"])
    if explicit:
        setters.append(_named(explicit))
    return setters, implicit, pod_ok


def run_as_non_root(spec: dict[str, Any]) -> Result:
    setters, implicit, _ = _pod_or_containers(spec, lambda ctx: ctx.get("runAsNonRoot"), lambda v: v is True)
    if setters:
        return "runAsNonRoot != true", f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
    if implicit:
        return "runAsNonRoot != true", f"pod or {_named(implicit)} must set securityContext.runAsNonRoot=true"
    return None


def run_as_user(spec: dict[str, Any]) -> Result:
    setters = ["pod"] if (spec.get("securityContext") or {}).get("runAsUser") == 0 else []
    names = [c["name"] for c in _containers(spec) if _context(c).get("runAsUser") == 0]
    if names:
        setters.append(_named(names))
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


def seccomp_restricted(spec: dict[str, Any]) -> Result:
    valid = ("RuntimeDefault", "Localhost")
    setters, implicit, _ = _pod_or_containers(spec, _seccomp_type, lambda v: v in valid)
    if setters:
        values = sorted(
            {t for ctx in [spec.get("securityContext") or {}, *(_context(c) for c in _containers(spec))]
             if (t := _seccomp_type(ctx)) is not None and t not in valid}
        )  # fmt: skip
        return (
            "seccompProfile",
            f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to {_quote(values)}",
        )
    if implicit:
        detail = (
            f'pod or {_named(implicit)} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
        )
        return "seccompProfile", detail
    return None


#: Each level's checks in the order they register (their files' names): ``EvaluatePod`` runs the
#: baseline checks, then the restricted ones or, at baseline only, the baseline checks that a restricted
#: one covers (``Overlap``: ``capabilities_baseline``, ``seccompProfile_baseline``).
BASELINE = (host_namespaces, host_path_volumes, host_ports, privileged)
OVERLAPPING_BASELINE = (capabilities_baseline, seccomp_baseline)
RESTRICTED = (allow_privilege_escalation, capabilities_restricted, restricted_volumes, run_as_non_root, run_as_user,
              seccomp_restricted)  # fmt: skip


def violations(level: str, spec: dict[str, Any]) -> list[str]:
    """``<reason> (<detail>)`` of each failed check of ``level`` (baseline's first under restricted)."""
    checks = {"baseline": BASELINE + OVERLAPPING_BASELINE, "restricted": BASELINE + RESTRICTED}.get(level, ())
    return [f"{reason} ({detail})" for check in checks if (found := check(spec)) for reason, detail in [found]]


def enforced(labels: dict[str, Any]) -> tuple[str, str]:
    """The namespace's enforced (level, version), as ``api.PolicyToEvaluate`` reads its labels: no label is
    the default ``privileged:latest``; a level that is not one of the three is ``restricted`` (enforce fails
    closed), a version other than ``latest`` or ``v1.<minor>`` is ``latest``."""
    level = labels.get(ENFORCE, "privileged")
    version = labels.get(ENFORCE_VERSION, "latest")
    if level not in LEVELS:
        level = "restricted"
    if version != "latest" and not re.fullmatch(r"v1\.(0|[1-9][0-9]*)", str(version)):
        version = "latest"
    return str(level), str(version)


def admit_pod(store: Store, namespace: str, pod: Obj) -> None:
    """Refuse ``pod`` (already named) with 403 when it violates its namespace's enforced level."""
    owner = store.find("namespaces", "", namespace)
    labels = ((owner or {}).get("metadata") or {}).get("labels") or {}
    level, version = enforced(labels)
    if level == "privileged" or not isinstance(pod.get("spec"), dict):
        return
    found = violations(level, pod["spec"])
    if found:
        name = pod["metadata"].get("name") or ""
        message = f'pods "{name}" is forbidden: violates PodSecurity "{level}:{version}": {", ".join(found)}'
        raise ApiError(403, "Forbidden", message, {"name": name, "kind": "pods"})
