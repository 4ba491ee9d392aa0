"""The emulator's served OpenAPI (``/openapi/v3``, ``/openapi/v2``), built from the ``kubernetes`` client's models.

kubectl reads it before ``apply``/``create -f``/``replace``: kubectl >= 1.27 looks in
``/openapi/v3/<group-version>`` for a PATCH operation of the object's kind that lists the
``fieldValidation`` query parameter (``cli-runtime``'s ``queryParamVerifierV3``) and, when there is
one, leaves unknown-field checks to the server (``fieldValidation=Strict``, ``field_validation``);
older kubectl validates on its side against ``/openapi/v2``. ``kubectl explain`` prints the field
descriptions of the same documents.

The generated client carries the release's schema: ``openapi_types`` (Python types),
``attribute_map`` (JSON names), the field descriptions (property docstrings) and the required
fields (setters that refuse ``None``). The strategic-merge keys (``x-kubernetes-patch-strategy``,
``x-kubernetes-patch-merge-key``) come from Kubernetes' Go struct tags, vendored as
``patch_strategies.json`` (``tools/k8s_patch_strategies.py``): kubectl 1.28 and older build
``apply``'s patch from them (``/openapi/v2``, served as protobuf by ``openapi_v2_proto``), and
without them would send a list of containers or env vars whole, so the server would keep the items
a manifest no longer names. PATCH operations still do not list the strategic-merge content type in
``/openapi/v3``, so kubectl 1.29+ builds that patch from its compiled-in types. Not served: the
descriptions of the kinds themselves, enums and formats other than the ones below. The documents
are built once per process (``functools.cache``).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import re
from pathlib import Path
from typing import Any

import kubernetes.client as k8s_models

from airflow_gpu.testing.kubernetes.store import RESOURCES, Resource

#: Where a model lives in the API's Go packages (the definition names kubectl sees); the rest is core/v1.
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
META_MODELS = frozenset(
    {"ObjectMeta", "OwnerReference", "ManagedFieldsEntry", "LabelSelector", "LabelSelectorRequirement", "ListMeta"}
)
BATCH_PREFIXES = ("Job", "CronJob", "PodFailurePolicy", "SuccessPolicy", "UncountedTerminatedPods")
RBAC_KINDS = frozenset(
    {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "PolicyRule", "RoleRef", "AggregationRule"}
)
#: The query parameters of a write, as the API server lists them (``fieldValidation`` is what kubectl looks for).
WRITE_PARAMETERS = {
    "dryRun": "When present, indicates that modifications should not be persisted.",
    "fieldManager": "fieldManager is a name associated with the actor or entity that is making these changes.",
    "fieldValidation": (
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing "
        "unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are "
        "silently dropped from the object, and will ignore all but the last duplicate field that the decoder "
        "encounters. - Warn: This will send a warning via the standard warning response header for each unknown "
        "field that is dropped from the object, and for each duplicate field that is encountered. The request "
        "will still succeed if there are no other errors, and will only persist the last of any duplicate fields. "
        "This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any "
        "unknown fields would be dropped from the object, or if any duplicate fields are present. The error "
        "returned from the server will contain all unknown and duplicate fields encountered."
    ),
}
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")
WRITE_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
#: The ``openapi_types`` scalars (``object`` is what the client makes of IntOrString).
SCALARS: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "int": {"type": "integer", "format": "int32"},
    "float": {"type": "number", "format": "double"},
    "bool": {"type": "boolean"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    "object": {"type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": True},
}
#: ``{definition: {property: {x-kubernetes-patch-strategy, x-kubernetes-patch-merge-key}}}``.
PATCH_STRATEGIES: dict[str, dict[str, dict[str, str]]] = json.loads(
    (Path(__file__).with_name("patch_strategies.json")).read_text()
)["definitions"]
_TYPE = re.compile(r"^(list|dict)\[(?:str, )?(.+)\]$|^dict\(str, (.+)\)$")


def model_name(resource: Resource) -> str:
    """The ``kubernetes`` client class of a served kind: ``V1Pod``, ``V1Job``, ``CoreV1Event``."""
    name = resource.api_version.rsplit("/", 1)[-1].capitalize() + resource.kind
    return name if hasattr(k8s_models, name) else "Core" + name


def definition_name(model: str) -> str:
    """``V1PodSpec`` -> ``io.k8s.api.core.v1.PodSpec``, the name the API server gives the schema (the
    client prefixes a name two groups share with the group: ``CoreV1EventSeries``)."""
    match = re.match(r"^([A-Z][a-z]+)?(V\d+(?:alpha\d+|beta\d+)?)([A-Z].*)$", model)
    if match is None:
        raise ValueError(f"not a kubernetes client model: {model}")
    prefix, version, kind = match.groups()
    version = version.lower()
    if prefix and prefix != "Core":
        return f"io.k8s.api.{prefix.lower()}.{version}.{kind}"
    if kind in META_MODELS:
        return f"{META}.{kind}"
    if kind in RBAC_KINDS:
        return f"io.k8s.api.rbac.{version}.{kind}"
    if kind.startswith(BATCH_PREFIXES):
        return f"io.k8s.api.batch.{version}.{kind}"
    return f"io.k8s.api.core.{version}.{kind}"


def _description(cls: type, attribute: str) -> str:
    """The field's description: the body of the generated getter's docstring."""
    doc = getattr(cls, attribute).fget.__doc__ or ""
    body = doc.split("\n", 1)[1] if "\n" in doc else ""
    body = body.split(":return:", 1)[0]
    return " ".join(line.replace("# noqa: E501", "").strip() for line in body.splitlines()).strip()


def _required(cls: type, attribute: str) -> bool:
    """A field the release marks required: its generated setter refuses ``None``."""
    try:
        return "must not be `None`" in inspect.getsource(getattr(cls, attribute).fset)
    except (OSError, TypeError):
        return False


def _schema(python_type: str, ref: str, definitions: dict[str, Any]) -> dict[str, Any]:
    """A property's schema from its ``openapi_types`` entry; models become references (``ref`` is the prefix)."""
    match = _TYPE.match(python_type)
    if match:
        inner = _schema(match.group(2) or match.group(3), ref, definitions)
        if python_type.startswith("list"):
            return {"type": "array", "items": inner}
        return {"type": "object", "additionalProperties": inner}
    scalar = SCALARS.get(python_type)
    if scalar is not None:
        return dict(scalar)
    _define(python_type, definitions, ref)
    return {"$ref": ref + definition_name(python_type)}


def _define(model: str, definitions: dict[str, Any], ref: str = "#/components/schemas/") -> None:
    name = definition_name(model)
    if name in definitions:
        return
    cls = getattr(k8s_models, model)
    properties: dict[str, Any] = {}
    definitions[name] = schema = {"type": "object", "properties": properties}
    required = []
    strategies = PATCH_STRATEGIES.get(name, {})
    for attribute, python_type in cls.openapi_types.items():
        json_name = cls.attribute_map[attribute]
        prop = _schema(python_type, ref, definitions)
        description = _description(cls, attribute)
        if "$ref" in prop and ref.startswith("#/components"):  # OpenAPI 3.0 ignores siblings of $ref
            prop = {"allOf": [prop]}
        if description:
            prop["description"] = description
        prop.update(strategies.get(json_name, {}))
        properties[json_name] = prop
        if _required(cls, attribute):
            required.append(json_name)
    if required:
        schema["required"] = required


@functools.cache
def definitions(v2: bool = False) -> dict[str, Any]:
    """Every schema the served kinds reach, by definition name, each kind tagged with its group-version-kind."""
    ref = "#/definitions/" if v2 else "#/components/schemas/"
    result: dict[str, Any] = {}
    for resource in RESOURCES.values():
        _define(model_name(resource), result, ref)
        group, _, version = resource.api_version.rpartition("/")
        gvk = [{"group": group, "kind": resource.kind, "version": version}]
        result[definition_name(model_name(resource))]["x-kubernetes-group-version-kind"] = gvk
    return result


def schema_of(resource: Resource) -> dict[str, Any]:
    """The served schema of a kind (``field_validation`` walks it)."""
    schema: dict[str, Any] = definitions()[definition_name(model_name(resource))]
    return schema


def _parameter(name: str, description: str, location: str = "query", v2: bool = False) -> dict[str, Any]:
    parameter: dict[str, Any] = {"name": name, "in": location, "description": description}
    if location == "path":
        parameter["required"] = True
    if v2:
        parameter.update({"type": "string", "uniqueItems": True})
    else:
        parameter["schema"] = {"type": "string", "uniqueItems": True}
    return parameter


def _operation(resource: Resource, action: str, verb: str, body: tuple[str, ...], v2: bool) -> dict[str, Any]:
    """One operation as the API server's route builder writes it: the action and the kind it serves."""
    group, _, version = resource.api_version.rpartition("/")
    kind_ref = ("#/definitions/" if v2 else "#/components/schemas/") + definition_name(model_name(resource))
    operation: dict[str, Any] = {
        "operationId": f"{verb}{'Namespaced' if resource.namespaced else ''}{resource.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": group, "kind": resource.kind, "version": version},
        "responses": {"200": {"description": "OK"}},
    }
    if body:
        operation["parameters"] = [_parameter(name, text, v2=v2) for name, text in WRITE_PARAMETERS.items()]
        schema = {"type": "object"} if action == "patch" else {"$ref": kind_ref}
        if v2:
            operation["consumes"] = list(body)
            operation["parameters"].insert(0, {"name": "body", "in": "body", "required": True, "schema": schema})
        else:
            operation["requestBody"] = {"content": {t: {"schema": schema} for t in body}, "required": True}
    return operation


def paths(group_version: str, v2: bool = False) -> dict[str, Any]:
    """The collection and item paths of each kind served in ``group_version``."""
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    result: dict[str, Any] = {}
    for resource in RESOURCES.values():
        if resource.api_version != group_version:
            continue
        base = (
            f"{prefix}/namespaces/{{namespace}}/{resource.plural}"
            if resource.namespaced
            else (f"{prefix}/{resource.plural}")
        )
        scope = [_parameter("namespace", "object name and auth scope", "path", v2)] if resource.namespaced else []
        result[base] = {
            "get": _operation(resource, "list", "list", (), v2),
            "post": _operation(resource, "post", "create", WRITE_TYPES, v2),
            "parameters": scope,
        }
        result[base + "/{name}"] = {
            "get": _operation(resource, "get", "read", (), v2),
            "put": _operation(resource, "put", "replace", WRITE_TYPES, v2),
            "patch": _operation(resource, "patch", "patch", PATCH_TYPES, v2),
            "delete": _operation(resource, "delete", "delete", (), v2),
            "parameters": [_parameter("name", f"name of the {resource.kind}", "path", v2), *scope],
        }
    return result


def group_versions() -> list[str]:
    return sorted({resource.api_version for resource in RESOURCES.values()})


def _url_path(group_version: str) -> str:
    return "api/v1" if group_version == "v1" else f"apis/{group_version}"


@functools.cache
def v3_document(group_version: str) -> bytes:
    """``/openapi/v3/api/v1``, ``/openapi/v3/apis/batch/v1``: paths and every schema, as OpenAPI 3.0."""
    document = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths(group_version),
        "components": {"schemas": definitions()},
    }
    return json.dumps(document, separators=(",", ":")).encode()


@functools.cache
def v3_index() -> bytes:
    """``/openapi/v3``: where each group-version's document is, with a hash that changes with it."""
    entries = {}
    for group_version in group_versions():
        digest = hashlib.sha512(v3_document(group_version)).hexdigest()[:128].upper()
        entries[_url_path(group_version)] = {
            "serverRelativeURL": f"/openapi/v3/{_url_path(group_version)}?hash={digest}"
        }
    return json.dumps({"paths": entries}, separators=(",", ":")).encode()


def v3_path(url_path: str) -> str | None:
    """The group-version a ``/openapi/v3/<url_path>`` asks for; None when none is served there."""
    return next((gv for gv in group_versions() if _url_path(gv) == url_path), None)


@functools.cache
def v2_document() -> bytes:
    """``/openapi/v2`` as Swagger 2.0 JSON (what kubectl before 1.27 validates against)."""
    all_paths: dict[str, Any] = {}
    for group_version in group_versions():
        all_paths.update(paths(group_version, v2=True))
    document = {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": all_paths,
        "definitions": definitions(v2=True),
    }
    return json.dumps(document, separators=(",", ":")).encode()
