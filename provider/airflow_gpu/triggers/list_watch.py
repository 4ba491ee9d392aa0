"""The requests of the shared watch (``pod_watch``): LIST, WATCH, list again, back off; kept apart from its waiters.

``SharedPodWatch`` keeps the states triggers wait on and wakes them; this is how it learns them,
as an informer does. It LISTs the provider's objects of its kind, WATCHes from the list's
``resourceVersion`` with bookmarks, and hands every object it hears of to ``_record``. A stream
that ends is opened again from the last ``resourceVersion``; ``410 Expired`` lists again (an
object missing from the new list is recorded deleted); 429 and 5xx back off with jitter,
honouring ``Retry-After``; 403 on WATCH falls back to a LIST every ``poll_interval``; errors that
last reach the waiters (``error``). Objects the cache does not know are looked up once: a GET for
one, a LIST for a group's. A LIST comes in pages of ``PAGE_SIZE`` (``limit``/``continue``), so that
10,000 pods are 20 short parses between which the loop runs its triggers, not one of tens of MB.

Look-ups run while a list is between its pages (a relist after ``410``, every poll without watch
permission), and what they bring is newer than the list's snapshot, which holds nothing "created,
modified, or deleted after the first request" (the API's ``continue``): a pod a look-up found is
missing from every page because it was made after the snapshot, not because it went. So a look-up
is never in flight while a list's first page is asked for (one issued then waits for that page,
and the list waits for those already out), and a state recorded after the list began is left as it
is by its pages and by its end (the watch from the list's ``resourceVersion`` brings what follows).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import logging
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow_gpu.triggers.cluster import ClusterConnection
from airflow_gpu.triggers.kubernetes_api import (
    ApiStatusError,
    Kind,
    PodState,
    checked,
    resource_version,
    status_error,
)

#: The shared watch's logger, which operators know (``pod_watch``), for the lines written here too.
log = logging.getLogger("airflow_gpu.triggers.pod_watch")

#: Seconds a watch request lasts before it is opened again (the API server caps it at 30-60 min).
WATCH_SECONDS = 300
#: Backoff after an error: first wait, cap, and the jitter fraction.
BACKOFF_FIRST, BACKOFF_MAX, JITTER = 0.5, 30.0, 0.5
#: Requests failed in a row before the waiting triggers hear the error (about a minute of backoff).
MAX_FAILURES = 6
#: Seconds the loop lingers without waiters before it stops (a trigger that restarts reuses it).
LINGER_SECONDS = 30.0
#: Objects per LIST page: client-go's pager's default; a page of pods is a few MB at most.
PAGE_SIZE = 500
#: Lists started again after their snapshot expired between pages, before one unpaged list.
PAGE_RESTARTS = 2
#: Bytes above which a body is parsed in a thread, so that the loop's other tasks get turns meanwhile.
PARSE_IN_THREAD_BYTES = 256 * 1024


async def parse(raw: bytes) -> Any:
    """JSON of a response body; a large one in a thread, where the loop's thread still gets turns (fewer
    than one would hope: the C parser keeps the GIL for long stretches, hence the pages too)."""
    if len(raw) > PARSE_IN_THREAD_BYTES:
        return await asyncio.to_thread(json.loads, raw)
    return json.loads(raw)


class ListWatch(abc.ABC):
    """The informer's requests, for ``SharedPodWatch``, which holds the fields below and records what is heard."""

    connection: ClusterConnection
    namespace: str
    poll_interval: float
    kind: Kind
    states: dict[str, PodState]
    waiters: dict[str, int]
    groups: dict[tuple[str, str], int]
    resource_version: str | None
    polling: bool
    synced: asyncio.Event
    failures: int
    error: ApiStatusError | None
    _counter: int  # the number of the last state recorded

    _continuing: bool = False  # a list is between its pages (a 410 then expired its snapshot)
    _lookups: int = 0  # look-ups (a GET, or a group's LIST) in flight
    _lookups_done: asyncio.Event | None = None  # set when the last look-up in flight ends
    _snapshot: asyncio.Event | None = None  # a list's first page is asked for: set once it is in

    @abc.abstractmethod
    async def _record(self, name: str, pod: dict[str, Any] | None, deleted: bool = False) -> None:
        """One object heard (or its deletion)."""

    @abc.abstractmethod
    def _listed(self, names: set[str]) -> None:
        """A whole list was heard: these exist now (and nothing else)."""

    @abc.abstractmethod
    def _wake(self, name: str | None = None, pod: dict[str, Any] | None = None) -> None:
        """Wake the triggers waiting on ``name`` (all of them without one)."""

    async def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        delay = BACKOFF_FIRST
        idle_since: float | None = None
        while True:
            if self.waiters or self.groups:
                idle_since = None
            elif loop.time() - (idle_since := idle_since or loop.time()) > LINGER_SECONDS:
                return
            try:
                async with self.connection.client() as api:
                    while self.waiters or self.groups or loop.time() - (idle_since or loop.time()) <= LINGER_SECONDS:
                        if self.resource_version is None or self.polling:
                            await self._list(api)
                        if self.polling:
                            await asyncio.sleep(self.poll_interval)
                        elif not await self._watch(api):
                            await asyncio.sleep(BACKOFF_FIRST)  # closed at once, without an event: not a busy loop
                        self._succeeded()
                        delay = BACKOFF_FIRST
                        if not (self.waiters or self.groups):
                            idle_since = idle_since or loop.time()
                    return
            except asyncio.CancelledError:
                raise
            except ApiStatusError as error:
                if error.status == 410:  # compacted: list again
                    self.resource_version = None
                    continue
                if error.status == 403 and self.resource_version is not None and not self.polling:
                    self.polling = True
                    log.warning(
                        "RBAC does not grant `watch %s` in namespace %s (%s); listing the namespace every "
                        "%.0f s instead. Grant watch for one long request instead of a LIST per interval.",
                        self.kind.plural, self.namespace, error.message, self.poll_interval,
                    )  # fmt: skip
                    continue
                wait = error.retry_after if error.retry_after is not None else delay
                self._failed(error, f"answered {error}")
                await asyncio.sleep(wait * (1 + random.uniform(0, JITTER)))
                delay = min(BACKOFF_MAX, delay * 2)
            except Exception as error:  # a reset, a timeout, a proxy, a configuration that does not load
                self._failed(error, f"stopped ({type(error).__name__}: {error})")
                await asyncio.sleep(delay * (1 + random.uniform(0, JITTER)))
                delay = min(BACKOFF_MAX, delay * 2)

    def _succeeded(self) -> None:
        self.failures = 0
        if self.error is not None:
            self.error = None

    def _failed(self, error: Exception, what: str) -> None:
        """Count a failed request; a 403 on LIST at once, or MAX_FAILURES in a row, reach every waiter.

        The official trigger turns a failing GET into an ``error`` event (``trigger_reentry`` then
        defers again): waiting on a watch that cannot be had would instead look like a pod that
        never starts, or wait forever.
        """
        self.failures += 1
        log.info(
            "The watch of %s in %s %s; again shortly (%d in a row)",
            self.kind.plural,
            self.namespace,
            what,
            self.failures,
        )
        denied = isinstance(error, ApiStatusError) and error.status == 403
        if denied or self.failures >= MAX_FAILURES:
            self.error = error if isinstance(error, ApiStatusError) else ApiStatusError(0, what)
            if denied:
                log.error("Cannot list %s in namespace %s: %s", self.kind.plural, self.namespace, self.error.message)
            self._wake()

    async def _request(self, api: Any, selector: str | None = None, **params: Any) -> Any:
        from kubernetes_asyncio.client.exceptions import ApiException

        listing, _ = self.kind.calls(api)
        try:
            response = await listing(
                self.namespace, label_selector=selector or self.kind.selector, _preload_content=False, **params
            )
        except ApiException as error:
            headers: Mapping[str, str] = error.headers or {}
            raise status_error(error.status, error.body, headers.get("Retry-After")) from error
        return await checked(response)

    async def _list(self, api: Any) -> None:
        """LIST in pages of ``PAGE_SIZE``, as client-go's pager does: no page holds the loop long.

        The pages are one snapshot (the first page's ``resourceVersion``); if it is compacted between
        pages (``410 Expired``) the list starts again, and after ``PAGE_RESTARTS`` of those is read in
        one request, as client-go's ``FullListIfExpired``.
        """
        for attempt in range(PAGE_RESTARTS + 1):
            try:
                await self._list_pages(api, PAGE_SIZE if attempt < PAGE_RESTARTS else None)
                return
            except ApiStatusError as error:
                if error.status != 410 or not self._continuing:
                    raise
                log.info(
                    "The list of %s in %s expired between pages (%s); listing again",
                    self.kind.plural, self.namespace, error.message,
                )  # fmt: skip

    async def _list_pages(self, api: Any, limit: int | None) -> None:
        """One list, its pages read at the first one's snapshot; what look-ups recorded meanwhile is newer.

        A page may hold fewer than ``limit`` objects, none even, and still go on (the API's ``limit``:
        a selector filters them out): only ``continue`` says whether more follow.
        """
        listed: set[str] = set()
        token: str | None = None
        self._continuing = False
        first = self._snapshot = asyncio.Event()
        try:
            while self._lookups:  # those out now may be served before the snapshot: let them finish
                done = self._lookups_done = asyncio.Event()
                await done.wait()
            start = self._counter  # a state numbered above this was heard after the snapshot
            while True:
                paging: dict[str, Any] = {} if limit is None else {"limit": limit}
                if token is not None:
                    paging["_continue"] = token
                response = await self._request(api, _request_timeout=60, **paging)
                first.set()  # the snapshot is taken: a look-up sent from now on is served after it
                body = await parse(await response.read())
                for pod in body.get("items") or []:
                    name = pod["metadata"]["name"]
                    listed.add(name)
                    known = self.states.get(name)
                    if known is not None and known.version > start:
                        continue  # looked up after the snapshot: newer than this page (a 404 stays gone)
                    if known is None or known.deleted or resource_version(known.pod) != resource_version(pod):
                        await self._record(name, pod)
                metadata = body.get("metadata") or {}
                token = metadata.get("continue") or None
                if token is None:
                    break
                self._continuing = True
        finally:
            first.set()
            if self._snapshot is first:
                self._snapshot = None
        for name, state in list(self.states.items()):
            # Missing from the snapshot: gone while we were not watching, unless heard of since it was
            # taken (made after it); the watch from its resourceVersion brings that one's deletion.
            if name not in listed and not state.deleted and state.version <= start:
                await self._record(name, None, deleted=True)
        self._listed(listed)
        self.resource_version = metadata.get("resourceVersion")
        self._succeeded()
        self.synced.set()
        self._wake()  # waiters for pods the list did not have may look them up now

    async def _watch(self, api: Any) -> bool:
        """One watch request, to its end; True if it brought anything (an event or a bookmark)."""
        seconds = int(WATCH_SECONDS * random.uniform(0.9, 1.1))  # not every watch reopens at once
        response = await self._request(
            api,
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=seconds,
            _request_timeout=seconds + 30,
        )
        brought = False
        try:
            pending = b""
            async for chunk in response.content.iter_any():  # not readline: a pod's line may pass 128 KiB
                *lines, pending = (pending + chunk).split(b"\n")
                for raw in lines:
                    if raw.strip():
                        brought = True
                        await self._event(json.loads(raw))
            if pending.strip():
                await self._event(json.loads(pending))
        finally:
            response.release()
        return brought

    async def _event(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise status_error(obj.get("code", 500), json.dumps(obj), None)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind != "BOOKMARK":
            await self._record(obj["metadata"]["name"], obj, deleted=kind == "DELETED")
        self.resource_version = version or self.resource_version

    @contextlib.asynccontextmanager
    async def _looking_up(self) -> AsyncIterator[None]:
        """A look-up's request, sent only where it is served after the snapshot of any list it overlaps.

        A list asks for its first page only once no look-up is out, and one that would go out while
        that page is asked for waits for it: so a state a look-up records after a list began is newer
        than every page of that list, and no page or end of the list may undo it.
        """
        while self._snapshot is not None and not self._snapshot.is_set():
            await self._snapshot.wait()
        self._lookups += 1  # at once after the check: no list starts in between
        try:
            yield
        finally:
            self._lookups -= 1
            if not self._lookups and self._lookups_done is not None:
                self._lookups_done.set()

    async def _look_up(self, name: str) -> None:
        """One GET for a pod the list did not have: gone before we watched, or created since."""
        from kubernetes_asyncio.client.exceptions import ApiException

        with contextlib.suppress(Exception):  # the watch still tells; this only closes a gap
            async with self._looking_up(), self.connection.client() as api:
                _, read = self.kind.calls(api)
                try:
                    response = await checked(
                        await read(name, self.namespace, _preload_content=False, _request_timeout=60)
                    )
                except (ApiException, ApiStatusError) as error:
                    if error.status == 404 and name not in self.states:
                        await self._record(name, None, deleted=True)
                    return
                pod = json.loads(await response.read())
                if name not in self.states:
                    await self._record(name, pod)

    async def _look_up_group(self, label: str, value: str) -> None:
        """One LIST of a group's pods that existed before it was held (the watch kept none of them)."""
        with contextlib.suppress(Exception):  # the watch still tells; this only closes a gap
            async with self._looking_up(), self.connection.client() as api:
                response = await self._request(
                    api, selector=f"{self.kind.selector},{label}={value}", _request_timeout=60
                )
                for pod in (await parse(await response.read())).get("items") or []:
                    if pod["metadata"]["name"] not in self.states:
                        await self._record(pod["metadata"]["name"], pod)
