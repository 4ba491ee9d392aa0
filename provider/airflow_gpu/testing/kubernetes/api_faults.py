"""API faults and request counts: what a real API server does to its clients under load or upgrade.

A real cluster answers ``429 Too Many Requests`` with ``Retry-After`` (API Priority and Fairness),
``500``/``503`` while an API server restarts in a control-plane upgrade, ``403`` where RBAC does not
grant a verb, resets connections, and closes watch and log streams early (``--min-request-timeout``,
a load balancer's idle timeout). A :class:`ApiFault` makes the emulator do one of these to the
requests it matches, a given number of times, so that a test can prove a client rides it out.

Every request is also counted by verb, resource, subresource and code: the labels of the API
server's ``apiserver_request_total`` counter, served as Prometheus text on ``/metrics``. Verbs are
counted as the API server's metrics name them (``LIST``, ``WATCH``, ``GET``, ``POST``, ``PUT``,
``PATCH``, ``DELETE``, ``DELETECOLLECTION``, ``CONNECT`` for exec); faults match the RBAC verb
(``list``, ``watch``, ``get``, ``create``, ...), as a Role names it.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

#: Kubernetes ``Status`` reasons of the codes a fault may answer with.
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
#: The status code that stands for "the connection was reset, no response at all".
RESET = 0
#: RBAC verb -> the verb ``apiserver_request_total`` counts.
METRIC_VERBS = {
    "list": "LIST",
    "watch": "WATCH",
    "get": "GET",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETECOLLECTION",
}
VERBS = frozenset(METRIC_VERBS)


@dataclass(frozen=True)
class ApiCall:
    """What a request asks, in the API server's terms (its ``RequestInfo``)."""

    verb: str  # the RBAC verb
    resource: str  # the plural, "" for discovery and other non-resource paths
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    stream: bool = False  # a watch, or a followed log: what a ``cut_after`` fault can cut

    @property
    def metric_verb(self) -> str:
        if self.subresource == "exec":
            return "CONNECT"
        return METRIC_VERBS.get(self.verb, self.verb.upper())


@dataclass
class ApiFault:
    """Requests that match fail with ``status`` (``0``: the connection is reset), or, with ``cut_after``,
    their stream (a watch, a followed log) is closed after that many events or lines.

    ``times`` is how many matching requests it hits (``None``: all of them until it is cleared).
    ``resource`` is a plural (``pods``) or ``plural/subresource`` (``pods/log``); unset fields match any.
    ``served`` (with status ``0`` only): the request is carried out, then the connection is reset before
    the response goes out, as when a load balancer or a restarting API server drops it after etcd wrote:
    a create that the client never hears of, which its retry then meets as ``409 AlreadyExists``.
    ``retry_after`` (seconds) goes out as ``Retry-After`` and ``details.retryAfterSeconds``. An API server
    sends whole seconds, and the sync client's urllib3 refuses a fraction in the header; a fraction (0.2)
    is for tests of the asyncio clients, which read it as a number, that need not wait a whole second.
    """

    verb: str | None = None
    resource: str | None = None
    namespace: str | None = None
    name: str | None = None
    status: int = 429
    retry_after: float | None = None
    times: int | None = 1
    cut_after: int | None = None
    message: str | None = None
    served: bool = False
    hits: int = 0

    def __post_init__(self) -> None:
        if self.verb is not None and self.verb not in VERBS:
            raise ValueError(f"verb {self.verb!r} is not an RBAC verb; use one of {sorted(VERBS)}")
        if self.cut_after is None and self.status != RESET and self.status not in REASONS:
            accepted = f"0 (a reset) or one of {sorted(REASONS)}"
            raise ValueError(f"status {self.status} is not one the emulator answers; use {accepted}")
        if self.served and self.status != RESET:
            raise ValueError("served=True loses a served request's response: it needs status 0 (a reset)")
        if self.times is not None and self.times < 1:
            raise ValueError(f"times must be at least 1 (or None for every request), not {self.times}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ApiFault:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "hits"}
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown fault fields {unknown}; accepted: {sorted(cls.__dataclass_fields__)}")
        return cls(**known)

    def matches(self, call: ApiCall) -> bool:
        if self.cut_after is not None and not call.stream:
            return False
        resource = f"{call.resource}/{call.subresource}" if call.subresource else call.resource
        return (
            (self.verb is None or self.verb == call.verb)
            and (self.resource is None or self.resource == resource)
            and (self.namespace is None or self.namespace == call.namespace)
            and (self.name is None or self.name == call.name)
        )

    @property
    def spent(self) -> bool:
        return self.times is not None and self.hits >= self.times

    def status_body(self, call: ApiCall) -> dict[str, Any]:
        """The ``Status`` object the API server sends with this code."""
        reason = REASONS.get(self.status, "InternalError")
        message = self.message or {
            429: "Too many requests, please try again later.",
            500: "Internal error occurred: the server is restarting",
            503: "the server is currently unable to handle the request",
            403: f'{call.resource} is forbidden: User cannot {call.verb} resource "{call.resource}"',
        }.get(self.status, reason)
        details: dict[str, Any] = {"kind": call.resource}
        if call.name:
            details["name"] = call.name
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "details": details,
            "code": self.status,
        }


@dataclass
class ApiFaults:
    """The rules in force, and the count of every request served. Safe to change from any thread."""

    rules: list[ApiFault] = field(default_factory=list)
    requests: Counter[tuple[str, str, str, int]] = field(default_factory=Counter)
    injected: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, fault: ApiFault) -> ApiFault:
        with self._lock:
            self.rules.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def take(self, call: ApiCall) -> ApiFault | None:
        """The first live rule that matches, counted as hit once."""
        with self._lock:
            for fault in self.rules:
                if not fault.spent and fault.matches(call):
                    fault.hits += 1
                    self.injected.append({**asdict(call), "status": fault.status, "cut_after": fault.cut_after})
                    return fault
        return None

    def count(self, call: ApiCall, code: int) -> None:
        with self._lock:
            self.requests[(call.metric_verb, call.resource, call.subresource, code)] += 1

    def total(self, verb: str | None = None, resource: str | None = None, subresource: str | None = None) -> int:
        """Requests served so far, optionally of one metric verb (``LIST``), resource and subresource."""
        with self._lock:
            return sum(
                n
                for (v, r, s, _), n in self.requests.items()
                if (verb is None or v == verb) and (resource is None or r == resource)
                and (subresource is None or s == subresource)
            )  # fmt: skip

    def prometheus(self) -> str:
        """``apiserver_request_total`` in the Prometheus text format, one sample per label set."""
        lines = [
            "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, "
            "group, version, resource, subresource and HTTP response code.",
            "# TYPE apiserver_request_total counter",
        ]
        with self._lock:
            samples = sorted(self.requests.items())
        for (verb, resource, subresource, code), n in samples:
            lines.append(
                f'apiserver_request_total{{code="{code}",resource="{resource}",'
                f'subresource="{subresource}",verb="{verb}"}} {n}'
            )
        return "\n".join(lines) + "\n"
