"""The three PATCH formats of the Kubernetes API: JSON merge, strategic merge and JSON patch."""

from __future__ import annotations

import copy
import functools
from typing import Any

from airflow_gpu.testing.kubernetes.objects import ApiError, bad_request
from airflow_gpu.testing.kubernetes.patch_schema import Field, field_of

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def merge(target: Any, patch: Any, strategic: bool = False, model: str | None = None) -> Any:
    """RFC 7386 merge; the strategic flavour merges each list as its field's patch tags say
    (``patch_schema``: by its merge key, a union of scalars, or replaced whole), ``model`` being the
    client model of ``target`` (``V1Pod``), and obeys the directives kubectl's three-way patches
    carry (``strategic_directives``)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if strategic and patch.get(PATCH_DIRECTIVE) == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != PATCH_DIRECTIVE}
    if strategic and patch.get(PATCH_DIRECTIVE) == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if strategic and key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif strategic and isinstance(value, list):
            result[key] = merge_list(result.get(key), value, field_of(model, key))
        else:
            result[key] = merge(result.get(key), value, strategic, field_of(model, key).model)
    return strategic_directives(result, patch, model) if strategic else result


def merge_list(target: Any, patch: list[Any], field: Field) -> list[Any]:
    """``strategicpatch.mergeSlice``: a list whose strategy is not ``merge`` (or that carries
    ``{"$patch": "replace"}``) is the patch's; scalars are the union (original order, then the new
    ones); maps are merged item by item by the merge key, ``{"$patch": "delete", key: v}`` removes
    one, and an item with a new key is appended."""
    directives = [i for i in patch if isinstance(i, dict) and PATCH_DIRECTIVE in i]
    plain = [_strip(i) for i in patch if not (isinstance(i, dict) and i.get(PATCH_DIRECTIVE) in ("delete", "replace"))]
    original = target if isinstance(target, list) else []
    if not field.merges or any(i.get(PATCH_DIRECTIVE) == "replace" for i in directives):
        return plain
    if field.merge_key is None:
        union: list[Any] = []
        for value in [*original, *patch]:
            if value not in union:
                union.append(copy.deepcopy(value))
        return union
    key = field.merge_key
    merged = [copy.deepcopy(item) for item in original]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError(500, "InternalError", f"map: {item} does not contain declared merge key: {key}")
        if item.get(PATCH_DIRECTIVE) == "delete":
            merged = [m for m in merged if not (isinstance(m, dict) and m.get(key) == item[key])]
            continue
        at = next((n for n, m in enumerate(merged) if isinstance(m, dict) and m.get(key) == item[key]), None)
        if at is None:
            merged.append(merge({}, item, True, field.model))
        else:
            merged[at] = merge(merged[at], item, True, field.model)
    return merged


def _strip(item: Any) -> Any:
    return {k: v for k, v in item.items() if k != PATCH_DIRECTIVE} if isinstance(item, dict) else item


#: Strategic merge patch directives (``apimachinery/pkg/util/strategicpatch``).
PATCH_DIRECTIVE = "$patch"
RETAIN_KEYS = "$retainKeys"
SET_ELEMENT_ORDER = "$setElementOrder/"
DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList/"


def strategic_directives(result: dict[str, Any], patch: dict[str, Any], model: str | None = None) -> dict[str, Any]:
    """Apply a patch map's directives to the merged map: ``$retainKeys`` (keep only those keys),
    ``$deleteFromPrimitiveList/<list>`` (drop those values) and ``$setElementOrder/<list>`` (put
    the list in that order by the field's merge key, items it does not name last). None of them is
    stored."""
    for key, value in patch.items():
        field = key.split("/", 1)[-1]
        if key == RETAIN_KEYS and isinstance(value, list):
            for name in [k for k in result if k not in value]:
                del result[name]
        elif not isinstance(result.get(field), list) or not isinstance(value, list):
            continue
        elif key.startswith(DELETE_FROM_PRIMITIVE_LIST):
            result[field] = [item for item in result[field] if item not in value]
        elif key.startswith(SET_ELEMENT_ORDER):
            merge_key = field_of(model, field).merge_key or "name"
            order = [item.get(merge_key) if isinstance(item, dict) else item for item in value]
            position = functools.partial(_position, order=order, merge_key=merge_key)
            result[field] = sorted(result[field], key=position)
    return result


def _position(item: Any, order: list[Any], merge_key: str) -> int:
    """Where ``$setElementOrder`` puts a list item: by its merge key (or itself), others last."""
    value = item.get(merge_key) if isinstance(item, dict) else item
    return order.index(value) if value in order else len(order)


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(document: Any, parts: list[str]) -> Any:
    node = document
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def json_patch(document: Any, operations: Any) -> Any:
    """RFC 6902: add, remove, replace, test (copy and move as remove + add)."""
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    result = copy.deepcopy(document)
    for operation in operations:
        try:
            op, parts = operation["op"], _pointer(operation["path"])
            parent, last = _parent(result, parts), parts[-1]
            if op in ("add", "replace"):
                if isinstance(parent, list):
                    index = len(parent) if last == "-" else int(last)
                    if op == "add":
                        parent.insert(index, copy.deepcopy(operation["value"]))
                    else:
                        parent[index] = copy.deepcopy(operation["value"])
                else:
                    if op == "replace" and last not in parent:
                        raise KeyError(last)
                    parent[last] = copy.deepcopy(operation["value"])
            elif op == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif op == "test":
                value = parent[int(last)] if isinstance(parent, list) else parent[last]
                if value != operation["value"]:
                    raise ApiError(422, "Invalid", f"test operation failed at {operation['path']}")
            else:
                raise bad_request(f"unsupported JSON patch operation {op!r}")
        except (KeyError, IndexError, ValueError, TypeError) as error:
            raise ApiError(422, "Invalid", f"the JSON patch could not be applied: {error!r}") from None
    return result


def apply(document: Any, patch: Any, content_type: str, model: str | None = None) -> Any:
    """``model``: the client model of ``document`` (``V1Pod``), whose fields' tags steer a strategic merge."""
    if content_type.startswith(JSON_PATCH):
        return json_patch(document, patch)
    if content_type.startswith(STRATEGIC):
        return merge(document, patch, strategic=True, model=model)
    if content_type.startswith(MERGE) or content_type.startswith("application/json"):
        return merge(document, patch)
    accepted = f"{JSON_PATCH}, {MERGE}, {STRATEGIC}"
    message = f"the body of the request was in an unknown format - accepted media types include: {accepted}"
    raise ApiError(415, "UnsupportedMediaType", message)
