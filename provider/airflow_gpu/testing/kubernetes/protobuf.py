"""Request bodies in Kubernetes' protobuf encoding, read into the JSON objects the emulator stores.

Recent kubectl (1.32 seen here) sends the objects its typed generators build (``create namespace``,
``create quota``, ``create configmap|secret|serviceaccount|service|job``) as
``Content-Type: application/vnd.kubernetes.protobuf`` and offers JSON only for the answer: a
server that answers 415 gets no second try in JSON, so the API server has to read protobuf.

The wire format (apimachinery ``runtime/serializer/protobuf``): the 4 bytes ``k8s\\0``, then a
``runtime.Unknown`` whose ``typeMeta`` names apiVersion and kind and whose ``raw`` is the object's
message. Field numbers and types come from Kubernetes' ``generated.proto`` files, vendored as
``protobuf_fields.json`` for the messages reachable from the kinds the emulator serves
(``tools/k8s_protobuf_fields.py`` regenerates it; the file names the source version).

Go's generated marshallers write every non-pointer field, zero or not, so a zero scalar (``""``,
``0``, ``false``) or an empty message is read as absent, which is what Go's JSON ``omitempty``
would have written; map values and list items are kept as they are.
"""

from __future__ import annotations

import base64
import json
import struct
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

from airflow_gpu.testing.kubernetes.objects import ApiError

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
UNKNOWN = "k8s.io.apimachinery.pkg.runtime.Unknown"
META = "k8s.io.apimachinery.pkg.apis.meta.v1."
#: Messages whose JSON form is not an object.
QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
TIMES = (META + "Time", META + "MicroTime")
RAW = ("k8s.io.apimachinery.pkg.runtime.RawExtension", META + "FieldsV1")
DURATION = META + "Duration"
VARINT_TYPES = {"int32", "int64", "uint32", "uint64", "bool", "sint64"}


@cache
def _messages() -> dict[str, list[list[Any]]]:
    path = Path(__file__).with_name("protobuf_fields.json")
    messages: dict[str, list[list[Any]]] = json.loads(path.read_text())["messages"]
    return messages


def _fields(message: str) -> dict[int, tuple[str, str, str]]:
    return {number: (name, kind, label) for number, name, kind, label in _messages()[message]}


def _varint(data: bytes, at: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, at
        shift += 7


def _wire(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) for each field in ``data``, in order."""
    fields: list[tuple[int, int, Any]] = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 1:
            value, at = data[at : at + 8], at + 8
        elif wire == 2:
            size, at = _varint(data, at)
            value, at = data[at : at + size], at + size
        elif wire == 5:
            value, at = data[at : at + 4], at + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        fields.append((number, wire, value))
    return fields


def _scalar(kind: str, value: Any) -> Any:
    if kind == "string":
        return bytes(value).decode()
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode()
    if kind == "bool":
        return bool(value)
    if kind in ("int32", "int64"):
        return value - (1 << 64) if value >= 1 << 63 else value  # two's complement in 10 bytes
    if kind == "sint64":
        return (value >> 1) ^ -(value & 1)
    if kind == "double":
        return struct.unpack("<d", value)[0]
    if kind == "float":
        return struct.unpack("<f", value)[0]
    return value


def _special(message: str, data: bytes) -> Any:
    values = {number: value for number, _, value in _wire(data)}
    if message == QUANTITY:
        return bytes(values.get(1, b"")).decode()
    if message == INT_OR_STRING:
        return bytes(values.get(3, b"")).decode() if values.get(1) == 1 else _scalar("int32", values.get(2, 0))
    if message in TIMES:
        seconds = _scalar("int64", values.get(1, 0))
        if not seconds:
            return None
        moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
        fraction = f".{_scalar('int32', values.get(2, 0)):06d}" if message.endswith("MicroTime") else ""
        return moment.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"
    if message in RAW:
        raw = bytes(values.get(1, b""))
        return json.loads(raw) if raw else None
    if message == DURATION:
        return f"{_scalar('int64', values.get(1, 0)) / 1e9:g}s"
    return None


def _is_special(message: str) -> bool:
    return message in (QUANTITY, INT_OR_STRING, DURATION, *TIMES, *RAW)


def _value(kind: str, wire: int, value: Any) -> Any:
    if kind not in _messages():
        return _scalar(kind, value)
    return _special(kind, value) if _is_special(kind) else decode_message(kind, value)


def _empty(value: Any) -> bool:
    return value is None or value == "" or value is False or value == 0 or value == {} or value == []


def decode_message(message: str, data: bytes) -> dict[str, Any]:
    """One message as the object its JSON would be (see the module docstring for zero values)."""
    fields = _fields(message)
    out: dict[str, Any] = {}
    for number, wire, value in _wire(data):
        if number not in fields:
            continue  # as gogo's unmarshallers do with a field they do not know
        name, kind, label = fields[number]
        if label == "map":
            entry = {n: v for n, _, v in _wire(value)}
            key = bytes(entry.get(1, b"")).decode()
            raw = entry.get(2, b"" if kind not in VARINT_TYPES else 0)
            out.setdefault(name, {})[key] = _value(kind, 2, raw)
        elif label == "repeated":
            if wire == 2 and kind in VARINT_TYPES:  # packed
                at, items = 0, []
                while at < len(value):
                    item, at = _varint(value, at)
                    items.append(_scalar(kind, item))
                out.setdefault(name, []).extend(items)
            else:
                out.setdefault(name, []).append(_value(kind, wire, value))
        else:
            decoded = _value(kind, wire, value)
            if _empty(decoded):
                out.pop(name, None)
            else:
                out[name] = decoded
    return out


def message_for(api_version: str, kind: str) -> str:
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    group, version = group_version.split("/", 1)
    return f"k8s.io.api.{group}.{version}.{kind}"


def decode(body: bytes) -> dict[str, Any]:
    """A request body in ``application/vnd.kubernetes.protobuf`` as a JSON object, or a 415
    ``UnsupportedMediaType`` for a kind the emulator has no message for (what a server that does
    not know a kind's protobuf answers)."""
    if not body.startswith(MAGIC):
        raise ApiError(400, "BadRequest", "provided object is not a protobuf message: missing the k8s prefix")
    try:
        envelope = decode_message(UNKNOWN, body[len(MAGIC) :])
        type_meta = envelope.get("typeMeta") or {}
        api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
        message = message_for(api_version, kind)
        if message not in _messages():
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: "
                f"application/json, application/yaml (no protobuf for {api_version}/{kind})",
            )
        raw = base64.b64decode(envelope.get("raw") or "")
        obj = decode_message(message, raw)
    except (ValueError, UnicodeDecodeError, struct.error) as error:
        raise ApiError(400, "BadRequest", f"the protobuf body could not be decoded: {error}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}
