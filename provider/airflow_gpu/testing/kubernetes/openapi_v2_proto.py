"""``/openapi/v2`` in the protobuf form kubectl 1.28 and older ask for: gnostic's ``openapi.v2.Document``.

kubectl up to 1.28 (Debian bookworm's 1.20 among them) fetches the Swagger document with
``Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`` only, before ``apply``,
``create -f`` and ``explain``, and reads it through ``kube-openapi``'s ``proto`` package: it
validates manifests on its side against the definitions (``ValidationError(Pod.spec.containers[0]):
unknown field "imagee" in io.k8s.api.core.v1.Container``), finds each kind's schema by the
``x-kubernetes-group-version-kind`` extension, and (1.25 to 1.28) hands the check to the server when
the kind's PATCH operation lists the ``fieldValidation`` query parameter. A 406 there fails the
command. This module writes the JSON document of ``openapi.v2_document`` in that form.

The messages and field numbers are gnostic's ``openapiv2/OpenAPIv2.proto`` (github.com/google/gnostic,
commit 96635ff3a800e184f8b2f7bf9b3b765d0fa071cd; unchanged since kubectl 1.20 vendored gnostic
0.4.1), written out below for the part of Swagger 2.0 the emulator's document uses. A key that part
does not cover raises ``ValueError`` rather than being dropped, so a change to the JSON document
cannot silently go missing from this one. As gnostic's compiler does, every ``x-`` key becomes a
``NamedAny`` whose ``Any.yaml`` holds the value (JSON, which is YAML); proto3 writes no field that
holds its zero value.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from airflow_gpu.testing.kubernetes.openapi import v2_document as json_document

#: The media type the API server answers with (``kube-openapi``'s handler); kubectl's Go ``mime``
#: parser refuses the ``@`` of the one older kubectl asks for, so a server answering that fails it.
CONTENT_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
#: What a client may ask for: kubectl up to 1.28 sends the first (deprecated) one only.
CONTENT_TYPES = ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf", CONTENT_TYPE)

_VARINT, _LEN = 0, 2


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _message(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a string, bytes or an embedded message); an empty message is kept
    (its presence matters: ``Schema.properties`` set but empty is an object with no fields)."""
    return _varint(number << 3 | _LEN) + _varint(len(payload)) + payload


def _string(number: int, value: str) -> bytes:
    return _message(number, value.encode()) if value else b""


def _strings(number: int, values: list[str]) -> bytes:
    return b"".join(_message(number, value.encode()) for value in values)


def _bool(number: int, value: bool) -> bytes:
    return _varint(number << 3 | _VARINT) + b"\x01" if value else b""


Encoder = Callable[[Any], bytes]
#: Writes one field: (field number, JSON value) -> bytes.
Writer = Callable[[int, Any], bytes]


def _fields(message: str, vendor_extension: int | None, fields: dict[str, tuple[int, Writer]]) -> Encoder:
    """The encoder of a message whose JSON keys map one to one to fields (``fields``: JSON key ->
    (field number, field writer)); ``x-`` keys go to ``vendor_extension``, any other key is refused."""

    def encode(value: dict[str, Any]) -> bytes:
        out = bytearray()
        for key, item in value.items():
            if key.startswith("x-") and vendor_extension is not None:
                named_any = _string(1, key) + _message(2, _string(2, json.dumps(item, separators=(",", ":"))))
                out += _message(vendor_extension, named_any)
            elif key in fields:
                number, write = fields[key]
                out += write(number, item)
            else:
                raise ValueError(f"openapi.v2.{message} has no field for {key!r}")
        return bytes(out)

    return encode


def _of(encoder: Callable[[], Encoder]) -> Writer:
    """A message-typed field (``encoder`` is looked up late: Schema holds Schemas)."""
    return lambda number, value: _message(number, encoder()(value))


def _named(entry_number: int, value_encoder: Callable[[], Encoder], vendor_extension: int | None = None) -> Encoder:
    """gnostic's map messages (``Definitions``, ``Properties``, ``Paths``, ``Responses``): a repeated
    ``Named*`` entry (name = 1, value = 2) per key, in the JSON document's order."""

    def encode(value: dict[str, Any]) -> bytes:
        out = bytearray()
        for key, item in value.items():
            if key.startswith("x-") and vendor_extension is not None:
                out += _fields("VendorExtension", vendor_extension, {})({key: item})
            else:
                out += _message(entry_number, _string(1, key) + _message(2, value_encoder()(item)))
        return bytes(out)

    return encode


# --- Schema -----------------------------------------------------------------------------------


def _schema() -> Encoder:
    return _SCHEMA


def _type_item(number: int, value: str | list[str]) -> bytes:
    """``TypeItem {repeated string value = 1}``: JSON Schema's ``type`` may be one name or a list."""
    return _message(number, _strings(1, [value] if isinstance(value, str) else value))


def _items_item(number: int, value: dict[str, Any] | list[dict[str, Any]]) -> bytes:
    """``ItemsItem {repeated Schema schema = 1}``."""
    schemas = [value] if isinstance(value, dict) else value
    return _message(number, b"".join(_message(1, _SCHEMA(schema)) for schema in schemas))


def _additional_properties(number: int, value: dict[str, Any] | bool) -> bytes:
    """``AdditionalPropertiesItem {oneof {Schema schema = 1; bool boolean = 2}}`` (a false boolean is
    still the oneof's choice, so it is written)."""
    if isinstance(value, bool):
        return _message(number, _varint(2 << 3 | _VARINT) + (b"\x01" if value else b"\x00"))
    return _message(number, _message(1, _SCHEMA(value)))


_SCHEMA: Encoder = _fields(
    "Schema",
    31,
    {
        "$ref": (1, _string),
        "format": (2, _string),
        "title": (3, _string),
        "description": (4, _string),
        "uniqueItems": (16, _bool),
        "required": (19, _strings),
        "additionalProperties": (21, _additional_properties),
        "type": (22, _type_item),
        "items": (23, _items_item),
        "allOf": (24, lambda number, schemas: b"".join(_message(number, _SCHEMA(s)) for s in schemas)),
        "properties": (25, _of(lambda: _named(1, _schema))),
        "readOnly": (27, _bool),
    },
)

# --- Paths ------------------------------------------------------------------------------------

#: ``NonBodyParameter``'s oneof by ``in`` and the field numbers of each choice's message (they differ:
#: only query and form data have ``allow_empty_value``).
_NON_BODY = {
    "header": (1, {"required": 1, "in": 2, "description": 3, "name": 4, "type": 5, "format": 6, "uniqueItems": 19}),
    "formData": (2, {"required": 1, "in": 2, "description": 3, "name": 4, "type": 6, "format": 7, "uniqueItems": 20}),
    "query": (3, {"required": 1, "in": 2, "description": 3, "name": 4, "type": 6, "format": 7, "uniqueItems": 20}),
    "path": (4, {"required": 1, "in": 2, "description": 3, "name": 4, "type": 5, "format": 6, "uniqueItems": 19}),
}
_BOOLEANS = frozenset({"required", "uniqueItems"})


def _parameter(value: dict[str, Any]) -> bytes:
    """``ParametersItem {oneof {Parameter parameter = 1; JsonReference json_reference = 2}}``, and
    ``Parameter {oneof {BodyParameter body_parameter = 1; NonBodyParameter non_body_parameter = 2}}``."""
    if "$ref" in value:
        return _message(2, _string(1, value["$ref"]) + _string(2, value.get("description", "")))
    if value.get("in") == "body":
        body = _fields(
            "BodyParameter",
            6,
            {"description": (1, _string), "name": (2, _string), "in": (3, _string), "required": (4, _bool),
             "schema": (5, _of(_schema))},
        )  # fmt: skip
        return _message(1, _message(1, body(value)))
    if value.get("in") not in _NON_BODY:
        raise ValueError(f"openapi.v2.Parameter: no parameter is in {value.get('in')!r}")
    choice, numbers = _NON_BODY[value["in"]]
    fields: dict[str, tuple[int, Writer]] = {
        key: (number, _bool if key in _BOOLEANS else _string) for key, number in numbers.items()
    }
    sub_schema = _fields("NonBodyParameter", 23 if value["in"] in ("query", "formData") else 22, fields)
    return _message(1, _message(2, _message(choice, sub_schema(value))))


def _parameters(number: int, values: list[dict[str, Any]]) -> bytes:
    return b"".join(_message(number, _parameter(value)) for value in values)


def _response_value() -> Encoder:
    """``ResponseValue {oneof {Response response = 1; JsonReference json_reference = 2}}``."""
    response = _fields("Response", 5, {"description": (1, _string), "schema": (2, _of(lambda: _schema_item))})
    return lambda value: _message(1, response(value))


def _schema_item(value: dict[str, Any]) -> bytes:
    """``SchemaItem {oneof {Schema schema = 1; FileSchema file_schema = 2}}``."""
    return _message(1, _SCHEMA(value))


_OPERATION = _fields(
    "Operation",
    13,
    {
        "tags": (1, _strings),
        "summary": (2, _string),
        "description": (3, _string),
        "operationId": (5, _string),
        "produces": (6, _strings),
        "consumes": (7, _strings),
        "parameters": (8, _parameters),
        "responses": (9, _of(lambda: _named(1, _response_value, vendor_extension=2))),
        "schemes": (10, _strings),
        "deprecated": (11, _bool),
    },
)
_PATH_ITEM = _fields(
    "PathItem",
    10,
    {
        "$ref": (1, _string),
        "get": (2, _of(lambda: _OPERATION)),
        "put": (3, _of(lambda: _OPERATION)),
        "post": (4, _of(lambda: _OPERATION)),
        "delete": (5, _of(lambda: _OPERATION)),
        "options": (6, _of(lambda: _OPERATION)),
        "head": (7, _of(lambda: _OPERATION)),
        "patch": (8, _of(lambda: _OPERATION)),
        "parameters": (9, _parameters),
    },
)

_INFO = _fields("Info", 7, {"title": (1, _string), "version": (2, _string), "description": (3, _string)})
_DOCUMENT = _fields(
    "Document",
    16,
    {
        "swagger": (1, _string),
        "info": (2, _of(lambda: _INFO)),
        "host": (3, _string),
        "basePath": (4, _string),
        "schemes": (5, _strings),
        "consumes": (6, _strings),
        "produces": (7, _strings),
        "paths": (8, _of(lambda: _named(2, lambda: _PATH_ITEM, vendor_extension=1))),
        "definitions": (9, _of(lambda: _named(1, _schema))),
    },
)


def encode(document: dict[str, Any]) -> bytes:
    """A Swagger 2.0 document (JSON's shape) as a serialized ``openapi.v2.Document``."""
    return _DOCUMENT(document)


@functools.cache
def v2_document() -> bytes:
    """``/openapi/v2`` as kubectl 1.28 and older ask for it (the same document as ``openapi.v2_document``)."""
    return encode(json.loads(json_document()))


def negotiate(accept: str) -> tuple[bytes, str] | None:
    """The body and Content-Type of ``/openapi/v2`` for an ``Accept`` header: the first media type
    listed that is served (protobuf, or JSON for ``application/json`` and ``*/*``; no header is
    JSON); None for a client that takes neither (the API server's 406)."""
    if not accept.strip():
        return json_document(), "application/json"
    for media_type in accept.split(","):
        name = media_type.split(";")[0].strip()
        if name in CONTENT_TYPES:
            return v2_document(), CONTENT_TYPE
        if name in ("application/json", "application/*", "*/*"):
            return json_document(), "application/json"
    return None
