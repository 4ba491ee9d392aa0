"""Server-side field validation (KEP-2885): the ``fieldValidation`` query parameter of create, update and patch.

As kube-apiserver decodes a JSON body (``apiserver/pkg/endpoints/handlers/{create,update,patch}.go``
with ``sigs.k8s.io/json``'s strict decoder): every field the kind's schema (``openapi``) does not
declare is an ``unknown field "spec.containers[0].imagee"``, every key given twice in one object a
``duplicate field "metadata.name"``. Then by directive:

- ``Strict``: the request fails. Create and update answer 400 BadRequest
  ``Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "..."``
  (``transformDecodeError``); a patch answers 422 Invalid ``"" is invalid: patch: Invalid value:
  "...": strict decoding error: ...`` (the patched object for JSON and merge patches, the patch
  map as Go prints it for strategic merge).
- ``Warn`` (the default since 1.23): one ``Warning: 299 - "unknown field ..."`` header each, and
  the unknown fields are dropped from what is stored.
- ``Ignore``: dropped silently.

Protobuf bodies are not checked: the protobuf decoder has no unknown or duplicate fields to report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu.testing.kubernetes import openapi
from airflow_gpu.testing.kubernetes.objects import ApiError, bad_request
from airflow_gpu.testing.kubernetes.store import Resource

STRICT, WARN, IGNORE = "Strict", "Warn", "Ignore"
DIRECTIVES = (IGNORE, STRICT, WARN)


class _Pairs(dict[str, Any]):
    """A decoded JSON object that remembers which keys it was given more than once (the last value wins)."""

    duplicates: list[str]


def _pairs(items: list[tuple[str, Any]]) -> _Pairs:
    obj = _Pairs(items)
    seen: set[str] = set()
    obj.duplicates = []
    for key, _ in items:
        if key in seen and key not in obj.duplicates:
            obj.duplicates.append(key)
        seen.add(key)
    return obj


def loads(raw: bytes) -> Any:
    """Decode a JSON body keeping what the strict decoder needs: the duplicated keys of each object."""
    return json.loads(raw, object_pairs_hook=_pairs)


@dataclass
class Findings:
    """What a strict decode found: ``unknown field`` and ``duplicate field`` errors, in document order."""

    errors: list[str] = field(default_factory=list)

    def message(self) -> str:
        return "strict decoding error: " + ", ".join(self.errors)


def _resolve(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    for ref in [schema.get("$ref"), *(s.get("$ref") for s in schema.get("allOf") or [])]:
        if ref:
            return definitions[ref.rsplit("/", 1)[-1]]  # type: ignore[no-any-return]
    return schema


def _walk(value: Any, schema: dict[str, Any], path: str, definitions: dict[str, Any], found: Findings) -> Any:
    """Check ``value`` against ``schema``; return it without the fields the schema does not declare."""
    schema = _resolve(schema, definitions)
    if isinstance(value, list) and "items" in schema:
        return [_walk(item, schema["items"], f"{path}[{i}]", definitions, found) for i, item in enumerate(value)]
    if not isinstance(value, dict):
        return value
    prefix = f"{path}." if path else ""
    found.errors += [f'duplicate field "{prefix}{key}"' for key in getattr(value, "duplicates", [])]
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    kept: dict[str, Any] = {}
    for key, item in value.items():
        if properties is not None and key in properties:
            kept[key] = _walk(item, properties[key], prefix + key, definitions, found)
        elif isinstance(extra, dict):
            kept[key] = _walk(item, extra, prefix + key, definitions, found)
        elif properties is None:  # free-form (an object without a schema of its fields)
            kept[key] = item
        else:
            found.errors.append(f'unknown field "{prefix}{key}"')
    return kept


def duplicates(value: Any, path: str = "") -> list[str]:
    """The ``duplicate field`` errors of a patch body, found before the patch is applied (``strictErrs``)."""
    if isinstance(value, list):
        return [e for i, item in enumerate(value) for e in duplicates(item, f"{path}[{i}]")]
    if not isinstance(value, dict):
        return []
    prefix = f"{path}." if path else ""
    found = [f'duplicate field "{prefix}{key}"' for key in getattr(value, "duplicates", [])]
    return found + [e for key, item in value.items() for e in duplicates(item, prefix + key)]


def plain(value: Any) -> Any:
    """``value`` as plain dicts and lists (a patched object, to check for unknown fields only)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def check(obj: Any, resource: Resource) -> tuple[Any, Findings]:
    """The strict decoder's findings for ``obj`` (decoded with ``loads``) and ``obj`` without unknown fields."""
    found = Findings()
    pruned = _walk(obj, openapi.schema_of(resource), "", openapi.definitions(), found)
    return pruned, found


def directive(query: Any) -> str:
    """The request's ``fieldValidation`` (``Warn`` when absent, as the API server defaults it)."""
    value = query.get("fieldValidation") or WARN
    if value not in DIRECTIVES:
        supported = ", ".join(f'"{d}"' for d in DIRECTIVES)
        raise bad_request(f'fieldValidation: Unsupported value: "{value}": supported values: {supported}')
    return str(value)


def decode_error(found: Findings, resource: Resource, body: Any, raw: bytes) -> ApiError:
    """400 of a strict create or update, worded as ``transformDecodeError``."""
    kind = body.get("kind") if isinstance(body, dict) else None
    if isinstance(kind, str) and kind:
        version = str(body.get("apiVersion") or "").rpartition("/")[2]
        return bad_request(f'{kind} in version "{version}" cannot be handled as a {resource.kind}: {found.message()}')
    text = raw.decode("utf-8", "replace")
    summary = text[:30] + " ..." if len(text) > 30 else text
    return bad_request(
        f"the object provided is unrecognized (must be of type {resource.kind}): {found.message()} ({summary})"
    )


def go_format(value: Any) -> str:
    """``fmt.Sprintf("%+v", value)`` of a decoded JSON value: ``map[a:1 b:[x y]]``, keys sorted."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_format(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_format(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def patch_error(found: Findings, bad_value: str) -> ApiError:
    """422 of a strict patch: ``NewInvalid`` with no kind and no name, one ``patch`` cause."""
    detail = f"Invalid value: {json.dumps(bad_value)}: {found.message()}"
    cause = {"reason": "FieldValueInvalid", "message": detail, "field": "patch"}
    return ApiError(422, "Invalid", f' "" is invalid: patch: {detail}', {"causes": [cause]})


def warnings(found: Findings) -> list[str]:
    """``Warning`` header values: code 299, agent ``-``, the text quoted as Go's ``strconv.Quote``."""
    return [f"299 - {json.dumps(error)}" for error in found.errors]
