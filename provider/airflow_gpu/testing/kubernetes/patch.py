"""The three PATCH formats of the Kubernetes API: JSON merge, strategic merge and JSON patch."""

from __future__ import annotations

import copy
from typing import Any

from airflow_gpu.testing.kubernetes.objects import ApiError, bad_request

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def merge(target: Any, patch: Any, strategic: bool = False) -> Any:
    """RFC 7386 merge; the strategic flavour merges lists of named objects by ``name``."""
    if not isinstance(patch, dict):
        if strategic and isinstance(patch, list) and isinstance(target, list) and _named(patch) and _named(target):
            merged = {item["name"]: copy.deepcopy(item) for item in target}
            for item in patch:
                merged[item["name"]] = merge(merged.get(item["name"], {}), item, strategic)
            return list(merged.values())
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value, strategic)
    return result


def _named(items: list[Any]) -> bool:
    return all(isinstance(item, dict) and "name" in item for item in items)


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


def apply(document: Any, patch: Any, content_type: str) -> Any:
    if content_type.startswith(JSON_PATCH):
        return json_patch(document, patch)
    if content_type.startswith(STRATEGIC):
        return merge(document, patch, strategic=True)
    if content_type.startswith(MERGE) or content_type.startswith("application/json"):
        return merge(document, patch)
    accepted = f"{JSON_PATCH}, {MERGE}, {STRATEGIC}"
    message = f"the body of the request was in an unknown format - accepted media types include: {accepted}"
    raise ApiError(415, "UnsupportedMediaType", message)
