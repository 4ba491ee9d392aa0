"""Object shapes of the Kubernetes API: metadata, timestamps, ``Status`` errors, validation.

The emulator stores plain JSON dicts, as the API server does; these helpers give them the fields
clients rely on (uid, resourceVersion, creationTimestamp...) and refuse what the real API server
refuses, with the same ``Status`` bodies and codes.
"""

from __future__ import annotations

import json
import re
import secrets
import uuid
from datetime import datetime, timezone
from typing import Any

from airflow_gpu.accelerators.quantities import parse_quantity

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
#: The alphabet and length of the random suffix of ``generateName`` (apimachinery ``utilrand.String``,
#: ``names.SimpleNameGenerator``): no vowels, no look-alike digits, and the base cut to 58 characters.
NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
NAME_SUFFIX_LENGTH = 5
MAX_GENERATED_NAME_LENGTH = 63 - NAME_SUFFIX_LENGTH
RESTART_POLICIES = ("Always", "OnFailure", "Never")  # in the order of the API server's message
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def now() -> datetime:
    return datetime.now(timezone.utc)


def timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 with seconds, as the API server writes ``creationTimestamp``."""
    return (moment or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def timestamp_nano(moment: datetime | None = None) -> str:
    """RFC 3339 with nanoseconds, as the kubelet prefixes log lines with ``timestamps=true``."""
    moment = moment or now()
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}000Z"


def new_uid() -> str:
    return str(uuid.uuid4())


def generate_name(base: str) -> str:
    """A name from ``metadata.generateName`` as the API server makes it: the base (cut to 58
    characters) and five random characters of ``NAME_SUFFIX_ALPHABET``."""
    base = base[:MAX_GENERATED_NAME_LENGTH]
    return base + "".join(secrets.choice(NAME_SUFFIX_ALPHABET) for _ in range(NAME_SUFFIX_LENGTH))


def name_from_generate_name(obj: dict[str, Any]) -> None:
    """Fill ``metadata.name`` from ``generateName`` when only the latter is given."""
    metadata = obj.setdefault("metadata", {})
    if isinstance(metadata, dict) and not metadata.get("name") and isinstance(metadata.get("generateName"), str):
        metadata["name"] = generate_name(metadata["generateName"])


class ApiError(Exception):
    """An error the API answers with a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(kind: str, plural: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{plural}{"." + group if group else ""} "{name}" not found',
        {"name": name, "kind": plural, **({"group": group} if group else {})},
    )


def already_exists(plural: str, name: str, group: str = "", being_deleted: bool = False) -> ApiError:
    """The registry store's 409; it says when the object holding the name is being deleted (it keeps the
    name until it is gone: a Job deleted in the foreground, until its pods are)."""
    return ApiError(
        409,
        "AlreadyExists",
        f'{"object is being deleted: " if being_deleted else ""}{plural}{"." + group if group else ""} "{name}" '
        "already exists",
        {"name": name, "kind": plural, **({"group": group} if group else {})},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def conflict(plural: str, name: str, message: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {plural}{"." + group if group else ""} "{name}": {message}',
        {"name": name, "kind": plural, **({"group": group} if group else {})},
    )


def invalid(kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> ApiError:
    """422 Invalid, as ``errors.NewInvalid``: ``Job.batch "x" is invalid: field: message``."""
    summary = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    if len(causes) > 1:
        summary = f"[{summary}]"
    qualified = f"{kind}.{group}" if group else kind
    details: dict[str, Any] = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details)


def _cause(reason: str, field: str, message: str) -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}


def go_value(value: Any) -> str:
    """A bad value as ``field.Error`` prints it: strings quoted (``%q``), numbers and booleans bare."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


# The field errors of apimachinery's ``validation/field`` package, worded as ``Error.ErrorBody`` words them.


def required(field: str, detail: str = "") -> dict[str, str]:
    return _cause("FieldValueRequired", field, f"Required value: {detail}" if detail else "Required value")


def invalid_value(field: str, value: Any, detail: str) -> dict[str, str]:
    return _cause("FieldValueInvalid", field, f"Invalid value: {go_value(value)}: {detail}")


def invalid_omitted(field: str, detail: str) -> dict[str, str]:
    """``field.Invalid(path, field.OmitValueType{}, detail)``: no value printed."""
    return _cause("FieldValueInvalid", field, f"Invalid value: {detail}")


def not_supported(field: str, value: Any, supported: list[str]) -> dict[str, str]:
    values = ", ".join(json.dumps(v) for v in supported)
    return _cause("FieldValueNotSupported", field, f"Unsupported value: {go_value(value)}: supported values: {values}")


def duplicate(field: str, value: Any) -> dict[str, str]:
    return _cause("FieldValueDuplicate", field, f"Duplicate value: {go_value(value)}")


def forbidden(field: str, detail: str) -> dict[str, str]:
    return _cause("FieldValueForbidden", field, f"Forbidden: {detail}")


def non_negative(spec: dict[str, Any], key: str, path: str) -> list[dict[str, str]]:
    """``ValidateNonnegativeField`` on an optional integer field (a non-integer is a decoding error)."""
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, int) or isinstance(value, bool):
        return [invalid_value(f"{path}.{key}", value, "must be an integer")]
    return [invalid_value(f"{path}.{key}", value, "must be greater than or equal to 0")] if value < 0 else []


def dns_label_causes(field: str, value: Any) -> list[dict[str, str]]:
    """``IsDNS1123Label``: at most 63 characters, lower case alphanumerics and '-'."""
    if not isinstance(value, str):
        return [invalid_value(field, value, DNS_LABEL_MESSAGE)]
    causes = []
    if len(value) > 63:
        causes.append(invalid_value(field, value, "must be no more than 63 characters"))
    if not DNS_LABEL.match(value):
        causes.append(invalid_value(field, value, DNS_LABEL_MESSAGE))
    return causes


def validate_metadata(obj: dict[str, Any], namespaced: bool) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return [_cause("FieldValueRequired", "metadata", "Required value")]
    name = metadata.get("name")
    if not name:
        causes.append(_cause("FieldValueRequired", "metadata.name", "Required value: name or generateName is required"))
    elif not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        causes.append(
            _cause(
                "FieldValueInvalid",
                "metadata.name",
                f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        )
    for field in ("labels", "annotations"):
        values = metadata.get(field)
        if values is not None and (
            not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values())
        ):
            causes.append(
                _cause("FieldValueInvalid", f"metadata.{field}", "Invalid value: must map strings to strings")
            )
    return causes


def _quantity_causes(field: str, resources: dict[str, Any]) -> tuple[list[dict[str, str]], dict[str, float]]:
    causes: list[dict[str, str]] = []
    parsed: dict[str, float] = {}
    if not isinstance(resources, dict):
        return [_cause("FieldValueInvalid", field, "Invalid value: must be a map")], parsed
    for resource, value in resources.items():
        where = f"{field}[{resource}]"
        try:
            parsed[resource] = parse_resource(resource, value)
        except (ValueError, ArithmeticError):
            causes.append(_cause("FieldValueInvalid", where, f"Invalid value: {value!r}: must be a valid quantity"))
            continue
        if parsed[resource] < 0:
            causes.append(_cause("FieldValueInvalid", where, "Invalid value: must be greater than or equal to 0"))
        if is_extended(resource) and parsed[resource] != int(parsed[resource]):
            causes.append(_cause("FieldValueInvalid", where, "Invalid value: must be an integer"))
    return causes, parsed


def is_extended(resource: str) -> bool:
    """Device-plugin resources such as ``nvidia.com/gpu``: whole numbers, no overcommit."""
    return "/" in resource and not resource.startswith(("kubernetes.io/", "requests.", "hugepages-"))


def parse_resource(resource: str, value: Any) -> float:
    """A resource quantity as a float: cores for cpu, bytes for memory, a count otherwise."""
    return float(parse_quantity(value))


def validate_pod(pod: dict[str, Any]) -> list[dict[str, str]]:
    """The checks of the API server that a pod manifest commonly fails."""
    causes = validate_metadata(pod, namespaced=True)
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [*causes, _cause("FieldValueRequired", "spec", "Required value")]
    return causes + validate_pod_spec(spec, "spec")


def decode_null_quantities(spec: dict[str, Any]) -> None:
    """A quantity given as JSON ``null`` is zero, as the API server decodes it.

    ``resource.Quantity.UnmarshalJSON`` turns ``null`` into the zero quantity and keeps the key, so
    ``requests: {cpu: null}`` (what the Python client sends for ``V1ResourceRequirements(requests=
    {"cpu": None})``, as ``KubernetesPodOperator`` can) is stored and served as ``cpu: "0"``. It is
    the decoder's doing, before validation: every pod spec the emulator stores passes here.
    """
    for kind in ("initContainers", "containers"):
        entries = spec.get(kind)
        for container in entries if isinstance(entries, list) else []:
            resources = container.get("resources") if isinstance(container, dict) else None
            for section in ("limits", "requests"):
                values = resources.get(section) if isinstance(resources, dict) else None
                if isinstance(values, dict):
                    for resource in [r for r, v in values.items() if v is None]:
                        values[resource] = "0"


def _volume_names(spec: dict[str, Any], path: str, causes: list[dict[str, str]]) -> set[str]:
    """The pod's volume names (``ValidateVolumes``: each named once)."""
    declared: set[str] = set()
    for index, volume in enumerate(spec.get("volumes") or []):
        name = volume.get("name") if isinstance(volume, dict) else None
        where = f"{path}.volumes[{index}].name"
        if not name:
            causes.append(_cause("FieldValueRequired", where, "Required value"))
        elif name in declared:
            causes.append(_cause("FieldValueDuplicate", where, f"Duplicate value: {name!r}"))
        declared.add(str(name))
    return declared


def _volume_mount_causes(mounts: list[Any], declared: set[str], path: str) -> list[dict[str, str]]:
    """``ValidateVolumeMounts``: a mount names a volume of the pod, has a path, and its ``subPath``
    stays inside the volume (``validateLocalDescendingPath``)."""
    causes = []
    for index, mount in enumerate(mounts):
        where = f"{path}[{index}]"
        name = mount.get("name") if isinstance(mount, dict) else None
        if not name:
            causes.append(_cause("FieldValueRequired", f"{where}.name", "Required value"))
        elif name not in declared:
            causes.append(_cause("FieldValueNotFound", f"{where}.name", f'Not found: "{name}"'))
        if not isinstance(mount, dict) or not mount.get("mountPath"):
            causes.append(_cause("FieldValueRequired", f"{where}.mountPath", "Required value"))
            continue
        sub = str(mount.get("subPath") or "")
        if sub.startswith("/"):
            causes.append(
                _cause("FieldValueInvalid", f"{where}.subPath", f"Invalid value: {sub!r}: must be a relative path")
            )
        elif ".." in sub.split("/"):
            causes.append(
                _cause("FieldValueInvalid", f"{where}.subPath", f"Invalid value: {sub!r}: must not contain '..'")
            )
    return causes


def validate_pod_spec(spec: dict[str, Any], path: str) -> list[dict[str, str]]:
    """``ValidatePodSpec``'s commonly failed checks, at ``path`` (``spec`` or ``spec.template.spec``)."""
    decode_null_quantities(spec)
    causes: list[dict[str, str]] = []
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append(_cause("FieldValueRequired", f"{path}.containers", "Required value"))
        containers = []
    names: set[str] = set()
    declared = _volume_names(spec, path, causes)
    for kind in ("initContainers", "containers"):
        entries = spec.get(kind) or []
        if not isinstance(entries, list):
            causes.append(_cause("FieldValueInvalid", f"{path}.{kind}", "Invalid value: must be a list"))
            continue
        for index, container in enumerate(entries):
            where = f"{path}.{kind}[{index}]"
            if not isinstance(container, dict):
                causes.append(_cause("FieldValueInvalid", where, "Invalid value: must be an object"))
                continue
            name = container.get("name")
            if not name:
                causes.append(_cause("FieldValueRequired", f"{where}.name", "Required value"))
            elif not isinstance(name, str) or len(name) > 63 or not DNS_LABEL.match(name):
                causes.append(_cause("FieldValueInvalid", f"{where}.name", f"Invalid value: {name!r}"))
            elif name in names:
                causes.append(_cause("FieldValueDuplicate", f"{where}.name", f"Duplicate value: {name!r}"))
            else:
                names.add(name)
            if not container.get("image") or not isinstance(container.get("image"), str):
                causes.append(_cause("FieldValueRequired", f"{where}.image", "Required value"))
            causes += _volume_mount_causes(container.get("volumeMounts") or [], declared, f"{where}.volumeMounts")
            for field in ("command", "args"):
                value = container.get(field)
                if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
                    causes.append(_cause("FieldValueInvalid", f"{where}.{field}", "Invalid value: must be strings"))
            resources = container.get("resources") or {}
            if not isinstance(resources, dict):
                causes.append(_cause("FieldValueInvalid", f"{where}.resources", "Invalid value: must be an object"))
                continue
            limit_causes, limits = _quantity_causes(f"{where}.resources.limits", resources.get("limits") or {})
            request_causes, requests = _quantity_causes(f"{where}.resources.requests", resources.get("requests") or {})
            causes += limit_causes + request_causes
            for resource, amount in requests.items():
                if is_extended(resource):
                    if resource not in limits:
                        message = f"Required value: Limit must be set for non overcommitable resources ({resource})"
                        causes.append(_cause("FieldValueRequired", f"{where}.resources.limits", message))
                    elif limits[resource] != amount:
                        message = (
                            f"Invalid value: {resources['requests'][resource]!r}: must be equal to {resource} limit"
                        )
                        causes.append(_cause("FieldValueInvalid", f"{where}.resources.requests[{resource}]", message))
                elif resource in limits and amount > limits[resource]:
                    value = resources["requests"][resource]
                    message = f"Invalid value: {value!r}: must be less than or equal to {resource} limit"
                    causes.append(_cause("FieldValueInvalid", f"{where}.resources.requests[{resource}]", message))
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in RESTART_POLICIES:
        causes.append(not_supported(f"{path}.restartPolicy", policy, list(RESTART_POLICIES)))
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool) or grace < 0):
        causes.append(
            _cause("FieldValueInvalid", f"{path}.terminationGracePeriodSeconds", "Invalid value: must be >= 0")
        )
    for key in ("hostname", "subdomain"):  # the kubelet names the pod's host and domain after them
        if spec.get(key) not in (None, ""):
            causes += dns_label_causes(f"{path}.{key}", spec[key])
    for index, toleration in enumerate(spec.get("tolerations") or []):
        where = f"{path}.tolerations[{index}]"
        if not isinstance(toleration, dict):
            causes.append(_cause("FieldValueInvalid", where, "Invalid value: must be an object"))
            continue
        operator = toleration.get("operator", "Equal")
        if operator not in ("Exists", "Equal"):
            causes.append(_cause("FieldValueNotSupported", f"{where}.operator", f"Unsupported value: {operator!r}"))
        effect = toleration.get("effect")
        if effect not in (None, "", *TAINT_EFFECTS):
            causes.append(_cause("FieldValueNotSupported", f"{where}.effect", f"Unsupported value: {effect!r}"))
    node_selector = spec.get("nodeSelector")
    if node_selector is not None and (
        not isinstance(node_selector, dict) or not all(isinstance(v, str) for v in node_selector.values())
    ):
        causes.append(_cause("FieldValueInvalid", f"{path}.nodeSelector", "Invalid value: must map strings to strings"))
    return causes
