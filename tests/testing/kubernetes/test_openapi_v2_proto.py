"""``/openapi/v2`` in protobuf form, read back with the ``protobuf`` package (which Airflow's
OpenTelemetry exporter brings) against gnostic's ``openapiv2/OpenAPIv2.proto``.

The messages below are written out from that file (github.com/google/gnostic, the ``openapi.v2``
package kubectl's ``kube-openapi`` reads) on their own, not from the emulator's encoder, so a wrong
field number or wire type there shows up as a field this decoder does not know or a value in the
wrong place. Decoded, the document must say everything the JSON form says, and carry what kubectl
looks for: each kind's ``x-kubernetes-group-version-kind``, the ``fieldValidation`` query
parameter of each PATCH (``supportsQueryParam`` of cli-runtime, kubectl 1.25 to 1.28) and the
strategic-merge keys of the API server's schema (``PatchMetaFromOpenAPI``, kubectl 1.20 to 1.28).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from airflow_gpu.testing.kubernetes import openapi, openapi_v2_proto
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

#: gnostic's messages the served document uses, field for field as ``OpenAPIv2.proto`` declares them
#: (``name number type``; ``*`` repeated; the fields of the oneofs are plain fields here, which reads
#: the same bytes). ``Any.value`` (a ``google.protobuf.Any``) is left out: gnostic writes only ``yaml``.
GNOSTIC = {
    "Document": "swagger 1 string; info 2 Info; host 3 string; base_path 4 string; schemes 5 *string; "
    "consumes 6 *string; produces 7 *string; paths 8 Paths; definitions 9 Definitions; vendor_extension 16 *NamedAny",
    "Info": "title 1 string; version 2 string; description 3 string; vendor_extension 7 *NamedAny",
    "Any": "yaml 2 string",
    "NamedAny": "name 1 string; value 2 Any",
    "Paths": "vendor_extension 1 *NamedAny; path 2 *NamedPathItem",
    "NamedPathItem": "name 1 string; value 2 PathItem",
    "PathItem": "_ref 1 string; get 2 Operation; put 3 Operation; post 4 Operation; delete 5 Operation; "
    "options 6 Operation; head 7 Operation; patch 8 Operation; parameters 9 *ParametersItem; "
    "vendor_extension 10 *NamedAny",
    "Operation": "tags 1 *string; summary 2 string; description 3 string; operation_id 5 string; produces 6 *string; "
    "consumes 7 *string; parameters 8 *ParametersItem; responses 9 Responses; schemes 10 *string; deprecated 11 bool; "
    "vendor_extension 13 *NamedAny",
    "ParametersItem": "parameter 1 Parameter; json_reference 2 JsonReference",
    "JsonReference": "_ref 1 string; description 2 string",
    "Parameter": "body_parameter 1 BodyParameter; non_body_parameter 2 NonBodyParameter",
    "BodyParameter": "description 1 string; name 2 string; in 3 string; required 4 bool; schema 5 Schema; "
    "vendor_extension 6 *NamedAny",
    "NonBodyParameter": "query_parameter_sub_schema 3 QueryParameterSubSchema; "
    "path_parameter_sub_schema 4 PathParameterSubSchema",
    "QueryParameterSubSchema": "required 1 bool; in 2 string; description 3 string; name 4 string; "
    "allow_empty_value 5 bool; type 6 string; format 7 string; unique_items 20 bool; vendor_extension 23 *NamedAny",
    "PathParameterSubSchema": "required 1 bool; in 2 string; description 3 string; name 4 string; type 5 string; "
    "format 6 string; unique_items 19 bool; vendor_extension 22 *NamedAny",
    "Responses": "response_code 1 *NamedResponseValue; vendor_extension 2 *NamedAny",
    "NamedResponseValue": "name 1 string; value 2 ResponseValue",
    "ResponseValue": "response 1 Response; json_reference 2 JsonReference",
    "Response": "description 1 string; schema 2 SchemaItem; vendor_extension 5 *NamedAny",
    "SchemaItem": "schema 1 Schema",
    "Definitions": "additional_properties 1 *NamedSchema",
    "Properties": "additional_properties 1 *NamedSchema",
    "NamedSchema": "name 1 string; value 2 Schema",
    "Schema": "_ref 1 string; format 2 string; title 3 string; description 4 string; unique_items 16 bool; "
    "required 19 *string; additional_properties 21 AdditionalPropertiesItem; type 22 TypeItem; items 23 ItemsItem; "
    "all_of 24 *Schema; properties 25 Properties; read_only 27 bool; vendor_extension 31 *NamedAny",
    "AdditionalPropertiesItem": "schema 1 Schema; boolean 2 bool",
    "TypeItem": "value 1 *string",
    "ItemsItem": "schema 1 *Schema",
}
_SCALARS = {
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
}


def _document_class() -> type[Message]:
    file = descriptor_pb2.FileDescriptorProto(name="test_openapiv2.proto", package="openapi.v2", syntax="proto3")
    for message, spec in GNOSTIC.items():
        descriptor = file.message_type.add(name=message)
        for field in spec.split("; "):
            name, number, kind = field.split()
            repeated = kind.startswith("*")
            kind = kind.lstrip("*")
            entry = descriptor.field.add(name=name, number=int(number))
            entry.label = entry.LABEL_REPEATED if repeated else entry.LABEL_OPTIONAL
            if kind in _SCALARS:
                entry.type = _SCALARS[kind]
            else:
                entry.type, entry.type_name = entry.TYPE_MESSAGE, ".openapi.v2." + kind
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("openapi.v2.Document"))


def _unknown_fields(message: Message, where: str = "Document") -> list[str]:
    """Every place a field the decoder does not know was read (a wrong number or wire type)."""
    found = [where] if len(UnknownFieldSet(message)) else []
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        for i, item in enumerate(value if repeated else [value]):
            found += _unknown_fields(item, f"{where}.{field.name}[{i}]")
    return found


# --- the decoded message back in Swagger's JSON shape -------------------------------------------


def _extensions(message: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: json.loads(e["value"]["yaml"]) for e in message.get("vendor_extension", [])}


def _named(entries: list[dict[str, Any]], value: Any) -> dict[str, Any]:
    return {entry["name"]: value(entry["value"]) for entry in entries}


def _schema(message: dict[str, Any]) -> dict[str, Any]:
    renames = {"_ref": "$ref", "format": "format", "description": "description", "required": "required"}
    schema = {renames[key]: value for key, value in message.items() if key in renames}
    if "type" in message:
        (schema["type"],) = message["type"]["value"]
    if "items" in message:
        (item,) = message["items"]["schema"]
        schema["items"] = _schema(item)
    if "additional_properties" in message:
        schema["additionalProperties"] = _schema(message["additional_properties"]["schema"])
    if "properties" in message:
        schema["properties"] = _named(message["properties"].get("additional_properties", []), _schema)
    if message.get("unique_items"):
        schema["uniqueItems"] = True
    return {**schema, **_extensions(message)}


def _parameter(message: dict[str, Any]) -> dict[str, Any]:
    parameter = message["parameter"]
    if "body_parameter" in parameter:
        body = parameter["body_parameter"]
        return {**{k: v for k, v in body.items() if k != "schema"}, "schema": _schema(body["schema"])}
    (sub_schema,) = parameter["non_body_parameter"].values()
    renames = {"unique_items": "uniqueItems"}
    return {renames.get(key, key): value for key, value in sub_schema.items()}


def _operation(message: dict[str, Any]) -> dict[str, Any]:
    operation: dict[str, Any] = {"operationId": message["operation_id"], **_extensions(message)}
    operation["responses"] = _named(message["responses"]["response_code"], lambda value: value["response"])
    if "parameters" in message:
        operation["parameters"] = [_parameter(p) for p in message["parameters"]]
    if "consumes" in message:
        operation["consumes"] = message["consumes"]
    return operation


def _path_item(message: dict[str, Any]) -> dict[str, Any]:
    item = {verb: _operation(message[verb]) for verb in ("get", "put", "post", "delete", "patch") if verb in message}
    return {**item, "parameters": [_parameter(p) for p in message.get("parameters", [])]}


def _swagger(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "swagger": message["swagger"],
        "info": message["info"],
        "paths": _named(message["paths"]["path"], _path_item),
        "definitions": _named(message["definitions"]["additional_properties"], _schema),
    }


def _decoded(body: bytes) -> dict[str, Any]:
    document = _document_class()()
    document.ParseFromString(body)
    assert _unknown_fields(document) == []
    return _swagger(MessageToDict(document, preserving_proto_field_name=True))


def _key_order(value: Any) -> Any:
    """Swagger's meaning does not depend on key order; protobuf's ``Named*`` lists keep it anyway."""
    if isinstance(value, dict):
        return {key: _key_order(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_key_order(item) for item in value]
    return value


# --- tests ------------------------------------------------------------------------------------


def test_the_protobuf_document_says_what_the_json_one_says() -> None:
    decoded = _decoded(openapi_v2_proto.v2_document())
    assert _key_order(decoded) == _key_order(json.loads(openapi.v2_document()))


def test_kubectl_finds_kinds_their_patch_keys_and_field_validation_in_it() -> None:
    decoded = _decoded(openapi_v2_proto.v2_document())
    pod = decoded["definitions"]["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Pod", "version": "v1"}]
    container = decoded["definitions"]["io.k8s.api.core.v1.Container"]
    assert container["required"] == ["name"]
    assert container["properties"]["image"]["type"] == "string"
    assert container["properties"]["env"]["items"] == {"$ref": "#/definitions/io.k8s.api.core.v1.EnvVar"}
    # the API server's strategic-merge metadata (``patchMergeKey`` of the Go types)
    assert container["properties"]["env"]["x-kubernetes-patch-merge-key"] == "name"
    assert container["properties"]["ports"]["x-kubernetes-patch-merge-key"] == "containerPort"
    volumes = decoded["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["volumes"]
    assert volumes["x-kubernetes-patch-strategy"] == "merge,retainKeys"
    # what supportsQueryParam (cli-runtime, kubectl 1.25 to 1.28) looks for on the kind's PATCH
    job_patches = [
        item["patch"] for item in decoded["paths"].values()
        if "patch" in item and item["patch"]["x-kubernetes-group-version-kind"]["kind"] == "Job"
    ]  # fmt: skip
    assert job_patches
    for patch in job_patches:
        queries = [p["name"] for p in patch["parameters"] if p["in"] == "query"]
        assert "fieldValidation" in queries


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf", openapi_v2_proto.CONTENT_TYPE),  # kubectl 1.20
        ("application/com.github.proto-openapi.spec.v2.v1.0+protobuf", openapi_v2_proto.CONTENT_TYPE),
        ("application/json", "application/json"),
        ("application/json, */*", "application/json"),
    ],
)
def test_openapi_v2_answers_in_the_form_asked_for(
    kubernetes_emulator: KubernetesEmulator, accept: str, content_type: str
) -> None:
    request = urllib.request.Request(f"{kubernetes_emulator.url}/openapi/v2", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers.get_content_type() == content_type
        body = response.read()
    if content_type == "application/json":
        assert json.loads(body)["swagger"] == "2.0"
    else:
        assert _decoded(body)["definitions"].keys() == json.loads(openapi.v2_document())["definitions"].keys()


def test_openapi_v2_refuses_a_form_it_does_not_serve(kubernetes_emulator: KubernetesEmulator) -> None:
    request = urllib.request.Request(f"{kubernetes_emulator.url}/openapi/v2", headers={"Accept": "text/html"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 406
