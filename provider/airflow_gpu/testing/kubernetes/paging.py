"""Paged LISTs (``limit`` and ``continue``) as the API server serves them from etcd.

A LIST with ``limit=N`` returns at most N items; if more keys follow, ``metadata.continue`` holds an
opaque token for the next request, and ``metadata.remainingItemCount`` how many items remain
(omitted when the request had a label or field selector: the server does not know how many of the
remaining keys match). Every page is read at the first page's ``resourceVersion``, a consistent
snapshot, as etcd's MVCC reads at a revision. Once that revision is compacted the token expires:
``410 Expired``, whose ``Status`` carries a new token that goes on from the next key at the latest
state (an inconsistent list); a client that needs a consistent list starts again without
``continue``. A ``continue`` with a ``resourceVersion`` other than ``0`` is a ``400``.

With a selector, the API server fills each page (it reads on until ``limit`` objects match), but the
API's ``limit`` promises less: a page "may return fewer than the requested amount of items (up to
zero items) in the event all requested objects are filtered out", and a client must go by
``continue`` alone. ``short`` pages hold that: the matches among the next ``limit`` keys, with a
``continue`` while keys follow, so a client that counts on full pages is caught.

The store keeps the objects as they are now, changed in place, so a snapshot is copy-on-write: the
store hands each live snapshot an object's encoded text from before its first later change
(``Snapshot.before``); every other object is read as it is now, unchanged since the snapshot.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu.testing.kubernetes.objects import ApiError, bad_request

Obj = dict[str, Any]
Key = tuple[str, str]  # namespace ("" if cluster-scoped), name
#: Seconds a snapshot lives without compaction (etcd's default compaction interval is 5 minutes).
SNAPSHOT_SECONDS = 300.0
#: Snapshots kept at most; the oldest goes first (its tokens then expire, as after a compaction).
MAX_SNAPSHOTS = 16
#: The token's resourceVersion in a 410's Status: go on from the next key at the latest state.
LATEST = -1


@dataclass
class Snapshot:
    """The objects of one kind at ``version``: those changed since are kept as they were (None: absent)."""

    plural: str
    version: int
    before: dict[Key, str | None] = field(default_factory=dict)
    created: float = field(default_factory=time.monotonic)


def encode_token(version: int, key: Key) -> str:
    """The ``continue`` token, shaped as the API server's (base64 of its version, resourceVersion and next key)."""
    start = f"{key[0]}/{key[1]}\x00"  # the next key is the first one after this
    return base64.urlsafe_b64encode(
        json.dumps({"v": "meta.k8s.io/v1", "rv": version, "start": start}).encode()
    ).decode()


def decode_token(token: str) -> tuple[int, Key]:
    """The token's resourceVersion and the last key it served; 400 for one this server did not make."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        namespace, _, name = data["start"].rstrip("\x00").partition("/")
        if data.get("v") != "meta.k8s.io/v1" or not isinstance(data["rv"], int):
            raise ValueError(data)
        return data["rv"], (namespace, name)
    except (binascii.Error, ValueError, KeyError, TypeError, AttributeError):
        raise bad_request(f"continue key is not valid: {token!r}") from None


class ExpiredContinue(ApiError):
    """``410 Expired`` for a compacted token; its ``Status`` carries a token that goes on inconsistently."""

    def __init__(self, key: Key) -> None:
        super().__init__(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can start a "
            "new list without the continue parameter, or use the continue token in this response to retrieve the "
            "remainder of the results. Continuing with the provided token results in an inconsistent list - "
            "objects that were created, modified, or deleted between the time the first chunk was returned and "
            "now may show "
            "up in the list.",
        )
        self.key = key

    def status(self) -> dict[str, Any]:
        body = super().status()
        body["metadata"] = {"continue": encode_token(LATEST, self.key)}
        return body


@dataclass
class Page:
    items: list[str]  # each item's JSON text
    version: int
    next_key: Key | None  # the last key served, when more keys follow
    remaining: int | None  # items after this page, without a selector


def page(
    current: dict[Key, Obj],
    encoded: dict[Key, str],
    snapshot: Snapshot | None,
    version: int,
    namespace: str | None,
    after: Key | None,
    limit: int,
    matches: Callable[[Obj], bool] | None,
    short: bool = False,
) -> Page:
    """Up to ``limit`` matching items after key ``after``, as they were at ``snapshot`` (now, if None);
    ``short``: only those among the next ``limit`` keys when a selector filters (none, even)."""
    before = snapshot.before if snapshot is not None else {}
    keys = sorted(
        key
        for key in (current.keys() | before.keys() if before else current.keys())
        if (namespace is None or key[0] == namespace) and (after is None or key > after)
    )
    items: list[str] = []
    last: Key | None = None
    served = 0  # keys read
    for key in keys:
        served += 1
        last = key  # the next page goes on after it, whether it was selected or not
        if key in before:
            text = before[key]
            selected = text is not None and (matches is None or matches(json.loads(text)))  # None: made since
        else:
            text = encoded[key]
            selected = matches is None or matches(current[key])
        if selected and text is not None:
            items.append(text)
        if len(items) >= limit or (short and matches is not None and served >= limit):
            break
    more = served < len(keys)
    remaining = None
    if more and matches is None:
        remaining = sum(1 for key in keys[served:] if before.get(key, "") is not None)
    return Page(items, version, last if more else None, remaining)


def list_body(kind: str, api_version: str, result: Page) -> str:
    """The ``<Kind>List`` text, the items joined as they are (each was encoded when it changed)."""
    metadata: dict[str, Any] = {"resourceVersion": str(result.version)}
    if result.next_key is not None:
        metadata["continue"] = encode_token(result.version, result.next_key)
        if result.remaining is not None:
            metadata["remainingItemCount"] = result.remaining
    head = json.dumps({"kind": kind, "apiVersion": api_version, "metadata": metadata}, separators=(",", ":"))
    return head[:-1] + ',"items":[' + ",".join(result.items) + "]}"
