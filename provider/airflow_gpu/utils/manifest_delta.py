"""The difference between two JSON documents, and the document back from one and the difference.

A deferred GPU pod's trigger carries the pod of every placement the spot policy may move to (each
candidate accelerator, spot and on-demand), so that it can create the replacement itself. Those
pods differ in a few fields (image, GPU resources, node affinity, tolerations, a few labels and
variables) and share the rest, the profiler's command included, which is most of their size. The
trigger's arguments are stored in Airflow's database for every deferred task: one pod and a delta
per other placement keeps them small.

Unlike a JSON merge patch (RFC 7386), lists of objects that are keyed by ``name`` (containers,
variables, volumes) are compared item by item, so a container's changed resources do not repeat
its command: only the changed items are written, and, where the names or their order differ,
each item's position in the first list. Two lists of as many objects without names are compared
position by position (a Batch multi-node job's ``nodePropertyOverrides``, whose one range holds
the container overrides). Other lists are replaced whole, and a removed key is written as
``DELETED``. Batch jobs' SubmitJob arguments travel the same way (``triggers.batch_resubmission``).
"""

from __future__ import annotations

import copy
from typing import Any

#: The value that stands for "this key is not in the other document".
DELETED = {"$deleted": True}
#: The key of a list of named objects written item by item.
BY_NAME = "$by_name"
#: The key of a list of objects written position by position (as many on both sides).
BY_INDEX = "$by_index"


def _objects(items: Any) -> bool:
    return isinstance(items, list) and all(isinstance(i, dict) for i in items)


def _named(items: Any) -> bool:
    return isinstance(items, list) and all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items)


def delta(base: Any, other: Any) -> Any:
    """What turns ``base`` into ``other`` through :func:`apply`; ``{}`` when they are equal dicts."""
    if isinstance(base, dict) and isinstance(other, dict):
        changes: dict[str, Any] = {}
        for key in base.keys() - other.keys():
            changes[key] = DELETED
        for key, value in other.items():
            if key not in base:
                changes[key] = copy.deepcopy(value)
            elif base[key] != value:
                changes[key] = delta(base[key], value)
        return changes
    if _named(base) and _named(other) and base and other:
        names = [i["name"] for i in other]
        if len(set(names)) == len(names) and len({i["name"] for i in base}) == len(base):
            return {BY_NAME: _by_name(base, other)}
    if _objects(base) and _objects(other) and len(base) == len(other) and base:
        return {BY_INDEX: [delta(b, o) for b, o in zip(base, other, strict=True)]}
    return copy.deepcopy(other)


def _by_name(base: list[dict[str, Any]], other: list[dict[str, Any]]) -> dict[str, Any]:
    """Two lists of uniquely named objects: the changed items by name, and where the layout differs,
    each item of ``other`` as its position in ``base`` (a number) or ``{"$new": item}``."""
    position = {item["name"]: number for number, item in enumerate(base)}
    changed = {
        i["name"]: delta(base[position[i["name"]]], i)
        for i in other
        if i["name"] in position and i != base[position[i["name"]]]
    }
    layout: list[Any] = [position.get(i["name"], {"$new": i}) for i in other]
    return {"changed": changed} | ({} if layout == list(range(len(base))) else {"layout": copy.deepcopy(layout)})


def apply(base: Any, change: Any) -> Any:
    """``base`` with ``change`` (from :func:`delta`) applied; ``base`` itself is left as it was."""
    if isinstance(change, dict) and BY_NAME in change and isinstance(base, list):
        if "changed" in change[BY_NAME]:
            changed, layout = change[BY_NAME]["changed"], change[BY_NAME].get("layout", range(len(base)))
            picked = [entry["$new"] if isinstance(entry, dict) else base[entry] for entry in layout]
            return [apply(i, changed[i["name"]]) if i["name"] in changed else copy.deepcopy(i) for i in picked]
        # Written before the layout (a trigger stored by an earlier release): every name, every item.
        by_name = {i["name"]: i for i in base}
        result = []
        for name, item in zip(change[BY_NAME]["order"], change[BY_NAME]["items"], strict=True):
            result.append(copy.deepcopy(item["$new"]) if "$new" in item else apply(by_name[name], item))
        return result
    if isinstance(change, dict) and BY_INDEX in change and isinstance(base, list):
        return [apply(b, c) for b, c in zip(base, change[BY_INDEX], strict=True)]
    if isinstance(change, dict) and isinstance(base, dict) and change != DELETED:
        result_dict = copy.deepcopy(base)
        for key, value in change.items():
            if value == DELETED:
                result_dict.pop(key, None)
            else:
                result_dict[key] = apply(base.get(key), value) if key in base else copy.deepcopy(value)
        return result_dict
    return copy.deepcopy(change)
