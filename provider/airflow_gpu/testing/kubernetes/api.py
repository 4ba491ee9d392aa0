"""The Kubernetes REST API over aiohttp, for what the ``kubernetes`` client, ``kubernetes_asyncio``
and ``KubernetesPodOperator`` call, plus the ``/_emulator/`` control endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from typing import Any

from aiohttp import web

from airflow_gpu.testing.kubernetes import (
    config_data,
    field_validation,
    openapi,
    openapi_v2_proto,
    paging,
    pod_exec,
    protobuf,
    rbac,
    tables,
)
from airflow_gpu.testing.kubernetes import patch as patching
from airflow_gpu.testing.kubernetes.admission import admit_validating, default_limit_range, prepare_quota
from airflow_gpu.testing.kubernetes.api_faults import RESET, ApiCall, ApiFault
from airflow_gpu.testing.kubernetes.cluster import NodeSpec
from airflow_gpu.testing.kubernetes.cluster_state import ClusterState
from airflow_gpu.testing.kubernetes.deletion import DeleteOptions
from airflow_gpu.testing.kubernetes.kubelet import log_lines
from airflow_gpu.testing.kubernetes.objects import (
    ApiError,
    bad_request,
    forbidden,
    invalid,
    name_from_generate_name,
    not_found,
    validate_metadata,
)
from airflow_gpu.testing.kubernetes.selectors import SelectorError, field_matcher, label_matcher
from airflow_gpu.testing.kubernetes.store import RESOURCES, Obj, Resource

STATE_KEY: web.AppKey[ClusterState] = web.AppKey("state", ClusterState)
#: The ServiceAccount tokens the TokenRequest API issued (``rbac``).
TOKENS_KEY: web.AppKey[rbac.Tokens] = web.AppKey("tokens", rbac.Tokens)
TRUE = {"true", "True", "1"}
#: Metadata a client cannot change with PUT or PATCH.
SERVER_OWNED_METADATA = (
    "name", "namespace", "uid", "creationTimestamp", "generation", "resourceVersion", "deletionTimestamp",
    "deletionGracePeriodSeconds",
)  # fmt: skip


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, separators=(",", ":")))


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except ApiError as error:
        return _json(error.status(), error.code)
    except SelectorError as error:
        return _json(bad_request(str(error)).status(), 400)
    except json.JSONDecodeError as error:
        return _json(bad_request(f"the request body is not JSON: {error}").status(), 400)


#: The request key under which a stream finds how many events or lines it may send (a cut fault).
CUT_AFTER: web.RequestKey[int] = web.RequestKey("cut_after", int)
#: Set once a stream is counted: as it starts, since it may last until the client goes away.
COUNTED: web.RequestKey[bool] = web.RequestKey("counted", bool)


async def start_stream(request: web.Request, response: web.StreamResponse) -> None:
    """Send a stream's headers and count the request then: a watch lasts as long as its client."""
    await response.prepare(request)
    call = describe(request)
    if call is not None:
        _state(request).api_faults.count(call, response.status)
        request[COUNTED] = True


def describe(request: web.Request) -> ApiCall | None:
    """The request as the API server's ``RequestInfo`` sees it; None for the emulator's own endpoints."""
    path = request.path
    if path.startswith("/_emulator/") or path == "/metrics":
        return None
    info = request.match_info
    method = request.method
    if "plural" not in info:
        for sub in ("log", "exec", "eviction"):
            if path.endswith(f"/{sub}") and "name" in info:
                verb = "get" if sub == "log" or (sub == "exec" and method == "GET") else "create"
                follows = sub == "log" and request.query.get("follow") in TRUE
                return ApiCall(verb, "pods", sub, info.get("namespace", ""), info["name"], stream=follows)
        return ApiCall("get", "")  # discovery, /version, /healthz
    named = "name" in info
    subresource = "status" if named and path.endswith("/status") else ""
    if method == "GET":
        verb = "get" if named else ("watch" if request.query.get("watch") in TRUE else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "")
        if method == "DELETE":
            verb = "delete" if named else "deletecollection"
    return ApiCall(
        verb, info["plural"], subresource, info.get("namespace", ""), info.get("name", ""), stream=verb == "watch"
    )


@web.middleware
async def _faults(request: web.Request, handler: Any) -> web.StreamResponse:
    """Injected API faults first (see ``api_faults``), then every request counted by its code."""
    state = _state(request)
    call = describe(request)
    if call is None:
        answered: web.StreamResponse = await handler(request)
        return answered
    fault = state.api_faults.take(call)
    if fault is not None and fault.cut_after is not None:
        request[CUT_AFTER] = fault.cut_after
    elif fault is not None and fault.served:  # carried out, then its response lost
        try:
            await handler(request)
        finally:
            state.api_faults.count(call, RESET)
            if request.transport is not None:
                request.transport.abort()
        raise asyncio.CancelledError
    elif fault is not None:
        state.api_faults.count(call, fault.status)
        if fault.status == RESET:
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError  # aiohttp drops a request whose handler is cancelled, unanswered
        headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else None
        response = _json(fault.status_body(call), fault.status)
        if headers:
            response.headers.update(headers)
        return response
    code = 500
    try:
        result: web.StreamResponse = await handler(request)
        code = result.status
        return result
    except web.HTTPException as error:
        code = error.status
        raise
    except asyncio.CancelledError:
        code = 499
        raise
    finally:
        if not request.get(COUNTED):
            state.api_faults.count(call, code)


def _attributes(request: web.Request, call: ApiCall) -> list[rbac.Attributes]:
    """What the authorizer is asked for ``call``: exec over a WebSocket (a GET) needs ``create`` too, as
    kube-apiserver checks since 1.31 (AuthorizePodWebsocketUpgradeCreatePermission)."""
    if not call.resource:
        if request.path.endswith("/token") and request.match_info.get("name"):  # TokenRequest
            info = request.match_info
            return [rbac.Attributes("create", "serviceaccounts", "", "token", info["namespace"], info["name"])]
        return [rbac.Attributes(call.verb, path=request.path)]
    resource = RESOURCES.get(call.resource)
    group = resource.group if resource is not None else ""
    asked = rbac.Attributes(call.verb, call.resource, group, call.subresource, call.namespace, call.name)
    if call.subresource == "exec" and call.verb == "get":
        return [asked, rbac.Attributes("create", call.resource, group, "exec", call.namespace, call.name)]
    return [asked]


@web.middleware
async def _authorize(request: web.Request, handler: Any) -> web.StreamResponse:
    """Authentication, then RBAC, before the handler (``rbac``); the emulator's own endpoints are open."""
    call = describe(request)
    if call is not None:
        user = request.app[TOKENS_KEY].user(request.headers.get("Authorization"))
        rbac.authorize(_state(request).store, user, _attributes(request, call))
    answered: web.StreamResponse = await handler(request)
    return answered


def _cut(request: web.Request) -> None:
    """Drop the connection mid-stream, as a restarting API server or an idle-timeout proxy does."""
    if request.transport is not None:
        request.transport.abort()


async def metrics(request: web.Request) -> web.Response:
    """``/metrics``: ``apiserver_request_total`` by verb, resource, subresource and code."""
    return web.Response(text=_state(request).api_faults.prometheus(), content_type="text/plain")


def _state(request: web.Request) -> ClusterState:
    return request.app[STATE_KEY]


def _resource(request: web.Request) -> Resource:
    plural = request.match_info["plural"]
    resource = RESOURCES.get(plural)
    group = request.match_info.get("group", "")
    if resource is None or (resource.group or "") != (group or ""):
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return resource


def _matcher(request: web.Request) -> Any:
    labels = label_matcher(request.query.get("labelSelector"))
    fields = field_matcher(request.query.get("fieldSelector"))
    return lambda obj: labels(obj["metadata"].get("labels") or {}) and fields(obj)


def _table(request: web.Request) -> bool:
    """Whether ``kubectl get`` asked for server-side Table output (``tables``)."""
    return tables.wants_table(request.headers.get("Accept"))


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    if raw and request.content_type == protobuf.CONTENT_TYPE:  # typed kubectl create (``protobuf``)
        return protobuf.decode(raw)
    return json.loads(raw) if raw else {}


async def _decoded(request: web.Request, resource: Resource) -> tuple[Any, list[str]]:
    """A create or update body after server-side field validation (``field_validation``): the
    object without unknown fields, and the ``Warning`` headers to answer with."""
    raw = await request.read()
    if raw and request.content_type == protobuf.CONTENT_TYPE:
        return protobuf.decode(raw), []
    mode = field_validation.directive(request.query)
    body = field_validation.loads(raw) if raw else {}
    pruned, found = field_validation.check(body, resource)
    if found.errors and mode == field_validation.STRICT:
        raise field_validation.decode_error(found, resource, body, raw)
    return pruned, field_validation.warnings(found) if mode == field_validation.WARN else []


def _warned(response: web.Response, warnings: list[str]) -> web.Response:
    for warning in warnings:
        response.headers.add("Warning", warning)
    return response


# --- discovery ------------------------------------------------------------------------------


async def version(request: web.Request) -> web.Response:
    return _json({"major": "1", "minor": "33", "gitVersion": "v1.33.0-airflow-gpu-emulator", "platform": "linux/amd64"})


async def api_versions(request: web.Request) -> web.Response:
    return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})


async def api_groups(request: web.Request) -> web.Response:
    groups = []
    for name in ("batch", rbac.GROUP):
        version = {"groupVersion": f"{name}/v1", "version": "v1"}
        groups.append({"name": name, "versions": [version], "preferredVersion": version})
    return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})


#: ``kubectl get all`` kinds and short names, as the real discovery lists them.
CATEGORIES = {"pods": ["all"], "services": ["all"], "jobs": ["all"]}
SHORT_NAMES = {
    "pods": ["po"], "services": ["svc"], "nodes": ["no"], "namespaces": ["ns"], "events": ["ev"],
    "serviceaccounts": ["sa"], "resourcequotas": ["quota"], "limitranges": ["limits"], "configmaps": ["cm"],
    "endpoints": ["ep"],
}  # fmt: skip
#: Kinds whose storage has no ``DeleteCollection``: the namespace registry does not offer it.
NO_DELETE_COLLECTION = frozenset({"namespaces"})
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _subresource(name: str, kind: str, verbs: list[str]) -> dict[str, Any]:
    return {"name": name, "singularName": "", "namespaced": True, "kind": kind, "verbs": verbs}


def _resource_list(group_version: str) -> dict[str, Any]:
    resources = []
    for r in RESOURCES.values():
        if r.api_version != group_version:
            continue
        entry: dict[str, Any] = {
            "name": r.plural,
            "singularName": r.kind.lower(),
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": [v for v in VERBS if v != "deletecollection" or r.plural not in NO_DELETE_COLLECTION],
        }
        for key, table in (("shortNames", SHORT_NAMES), ("categories", CATEGORIES)):
            if r.plural in table:
                entry[key] = table[r.plural]
        resources.append(entry)
    status_verbs = ["get", "patch", "update"]
    if group_version == "v1":
        resources += [
            _subresource("pods/log", "Pod", ["get"]),
            _subresource("pods/exec", "PodExecOptions", ["create", "get"]),
            _subresource("pods/status", "Pod", status_verbs),
            _subresource("pods/eviction", "Eviction", ["create"]),
            _subresource("services/status", "Service", status_verbs),
        ]
    elif group_version == "batch/v1":
        resources.append(_subresource("jobs/status", "Job", status_verbs))
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


async def core_resources(request: web.Request) -> web.Response:
    return _json(_resource_list("v1"))


async def batch_resources(request: web.Request) -> web.Response:
    return _json(_resource_list("batch/v1"))


async def rbac_resources(request: web.Request) -> web.Response:
    return _json(_resource_list(f"{rbac.GROUP}/v1"))


async def token_request(request: web.Request) -> web.Response:
    """The TokenRequest API (``kubectl create token``): a token that is the ServiceAccount's (``rbac``)."""
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    _state(request).store.get("serviceaccounts", namespace, name)  # 404 for an account that is not there
    body = await _body(request)
    spec = body.get("spec") if isinstance(body, dict) else None
    token = request.app[TOKENS_KEY].issue(namespace, name)
    return _json(
        {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec or {},
            "status": {"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"},
        },
        201,
    )


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def openapi_v3(request: web.Request) -> web.Response:
    """``/openapi/v3`` and ``/openapi/v3/{api/v1,apis/batch/v1}`` (``openapi``)."""
    path = request.match_info.get("path")
    if not path:
        return web.Response(body=openapi.v3_index(), content_type="application/json")
    group_version = openapi.v3_path(path)
    if group_version is None:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return web.Response(body=openapi.v3_document(group_version), content_type="application/json")


async def openapi_v2(request: web.Request) -> web.Response:
    """``/openapi/v2`` as JSON, or as protobuf to kubectl 1.28 and older (``openapi_v2_proto``)."""
    served = openapi_v2_proto.negotiate(request.headers.get("Accept", ""))
    if served is None:
        accepted = ", ".join(("application/json", *openapi_v2_proto.CONTENT_TYPES))
        raise ApiError(406, "NotAcceptable", f"only the following media types are accepted: {accepted}")
    body, content_type = served
    return web.Response(body=body, content_type=content_type)


# --- generic CRUD ---------------------------------------------------------------------------


async def list_or_watch(request: web.Request) -> web.StreamResponse:
    state, resource = _state(request), _resource(request)
    namespace = request.match_info.get("namespace")
    if namespace is None and resource.namespaced is False:
        namespace = None
    if namespace is not None:
        state.store.get("namespaces", "", namespace)
    matches = _matcher(request)
    if request.query.get("watch") in TRUE:
        return await _watch(request, state, resource, namespace, matches)
    limit, token = _int(request, "limit") or 0, request.query.get("continue") or None
    if limit > 0 or token is not None:  # a paged list (``paging``): the selector is None when there is none
        if token is not None and request.query.get("resourceVersion") not in (None, "", "0"):
            raise bad_request("specifying resource version is not allowed when using continue")
        selected = bool(request.query.get("labelSelector") or request.query.get("fieldSelector"))
        page = state.store.page(
            resource.plural, namespace, matches if selected else None, limit if limit > 0 else 1 << 62, token
        )
        text = paging.list_body(f"{resource.kind}List", resource.api_version, page)
        if _table(request):
            return _json(tables.from_list(resource.plural, json.loads(text), request.query.get("includeObject")))
        return web.Response(text=text, content_type="application/json")
    items = state.store.list(resource.plural, namespace, matches)
    listing = {
        "kind": f"{resource.kind}List",
        "apiVersion": resource.api_version,
        "metadata": {"resourceVersion": state.store.resource_version},
        "items": items,
    }
    if _table(request):
        return _json(tables.from_list(resource.plural, listing, request.query.get("includeObject")))
    return _json(listing)


async def _watch(
    request: web.Request, state: ClusterState, resource: Resource, namespace: str | None, matches: Any
) -> web.StreamResponse:
    """A watch as the API server's watch cache serves it.

    From a ``resourceVersion`` older than the kept history (compacted): one ``ERROR`` event holding
    a ``410 Expired`` Status, then the end; the client must list again. With
    ``allowWatchBookmarks=true``: a ``BOOKMARK`` (only ``metadata.resourceVersion``) every
    ``state.bookmark_seconds`` and before the stream's timeout, so that a client watching quiet
    objects can resume from a recent version.
    """
    response = web.StreamResponse(headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    await start_stream(request, response)
    since = request.query.get("resourceVersion")
    if state.store.too_old(since):
        gone = ApiError(410, "Expired", f"too old resource version: {since} ({state.store.oldest_version})")
        with contextlib.suppress(ConnectionResetError):
            await response.write((json.dumps({"type": "ERROR", "object": gone.status()}) + "\n").encode())
            await response.write_eof()
        return response
    watch = state.store.watch(resource.plural, namespace, matches, since)
    timeout = float(request.query.get("timeoutSeconds") or 1800)
    bookmarks = request.query.get("allowWatchBookmarks") in TRUE
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    next_bookmark = loop.time() + state.bookmark_seconds
    sent, cut_after = 0, request.get(CUT_AFTER)
    as_table, include = _table(request), request.query.get("includeObject")
    pods = resource.plural == "pods"  # when each pod's phases were first sent (``phase_clock``)

    async def bookmark() -> None:
        mark: dict[str, Any] = {"kind": resource.kind, "apiVersion": resource.api_version}
        mark["metadata"] = {"resourceVersion": state.store.resource_version}
        await response.write((json.dumps({"type": "BOOKMARK", "object": mark}) + "\n").encode())

    try:
        while (remaining := deadline - loop.time()) > 0:
            wait = min(remaining, next_bookmark - loop.time()) if bookmarks else remaining
            try:
                item = await asyncio.wait_for(watch.queue.get(), timeout=max(wait, 0.001))
            except asyncio.TimeoutError:
                if bookmarks and loop.time() >= next_bookmark - 0.001:
                    await bookmark()
                    next_bookmark = loop.time() + state.bookmark_seconds
                continue
            if item is None:
                break
            if cut_after is not None and sent >= cut_after:
                _cut(request)
                break
            event, encoded, (obj_namespace, name, version) = item  # the object as it was then, encoded once
            if as_table:
                encoded = json.dumps(tables.from_object(resource.plural, json.loads(encoded), include))
            if pods:  # stamped before the write: a client may read the event before ``write`` returns
                state.phase_clock.sent(obj_namespace, name, version)
            await response.write(f'{{"type":"{event}","object":{encoded}}}\n'.encode())
            sent += 1
        else:
            if bookmarks:
                await bookmark()  # the API server's last word before a timeout: where to resume
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        state.store.stop_watch(watch)
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


async def create(request: web.Request) -> web.Response:
    state, resource = _state(request), _resource(request)
    namespace = request.match_info.get("namespace", "")
    body, warnings = await _decoded(request, resource)
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    return _warned(await _create(state, resource, namespace, body, request.query.get("dryRun") == "All"), warnings)


async def _create(state: ClusterState, resource: Resource, namespace: str, body: Obj, dry_run: bool) -> web.Response:
    if dry_run:
        return _json(body, 201)
    if resource.plural == "pods":
        return _json(state.create_pod(namespace, body), 201)
    if resource.plural == "jobs":
        return _json(state.create_job(namespace, body), 201)
    if resource.plural == "services":
        return _json(state.create_service(namespace, body), 201)
    if namespace:
        state.store.get("namespaces", "", namespace)
    name_from_generate_name(body)
    metadata = body["metadata"]
    causes = validate_metadata(body, resource.namespaced)
    if resource.plural in config_data.PLURALS:  # no spec, no status
        causes += config_data.admit(resource.plural, body)
    elif resource.plural != "serviceaccounts" and resource.plural not in rbac.PLURALS:  # they have neither either
        body.setdefault("spec", {})
        body.setdefault("status", {})
        if resource.plural == "namespaces":  # the namespace registry's PrepareForCreate
            body["status"] = {"phase": "Active"}
        elif resource.plural == "resourcequotas":  # its registry clears status; the controller fills it
            prepare_quota(body)
        elif resource.plural == "limitranges":
            default_limit_range(body)
    if causes:
        raise invalid(resource.kind, str(metadata.get("name") or ""), causes)
    if resource.namespaced:
        admit_validating(state.store, resource.plural, namespace, body)  # count/<resource> quotas
    created = state.store.create(resource.plural, namespace, body)
    if resource.plural == "nodes":
        state.schedule_soon()
    elif resource.plural == "namespaces":  # the ServiceAccount controller's first act
        state.service_accounts.ensure_default(created["metadata"]["name"])
    return _json(created, 201)


def _key(request: web.Request) -> tuple[Resource, str, str]:
    resource = _resource(request)
    return resource, request.match_info.get("namespace", ""), request.match_info["name"]


async def get(request: web.Request) -> web.Response:
    resource, namespace, name = _key(request)
    obj = _state(request).store.get(resource.plural, namespace, name)
    if _table(request):
        return _json(tables.from_object(resource.plural, obj, request.query.get("includeObject")))
    return _json(obj)


def _replace(state: ClusterState, resource: Resource, current: Obj, new: Obj, status_only: bool) -> Obj:
    """Store ``new`` in place of ``current``, keeping what a client may not change."""
    new = copy.deepcopy(new)
    kept_metadata = {k: v for k, v in current["metadata"].items() if k in SERVER_OWNED_METADATA}
    if status_only:
        updated = {**current, "status": new.get("status", current.get("status"))}
    else:
        updated = {**new, "metadata": {**(new.get("metadata") or {}), **kept_metadata}}
        updated.pop("status", None)
        if "status" in current:  # a ConfigMap, a Secret or a ServiceAccount has none
            updated["status"] = current["status"]
        updated["apiVersion"], updated["kind"] = current["apiVersion"], current["kind"]
        added = set(updated["metadata"].get("finalizers") or []) - set(current["metadata"].get("finalizers") or [])
        if current["metadata"].get("deletionTimestamp") and added:
            detail = (
                f"no new finalizers can be added if the object is being deleted, found new finalizers {sorted(added)}"
            )
            raise invalid(resource.kind, current["metadata"]["name"], [forbidden("metadata.finalizers", detail)])
        state.validate_update(resource.plural, updated, current)
        if updated["metadata"].get("finalizers") == []:  # ``omitempty``: an empty list is no field
            del updated["metadata"]["finalizers"]
    current.clear()
    current.update(updated)
    result = state.store.update(resource.plural, current, spec_changed=not status_only)
    state.finalize(resource.plural, current)  # the last finalizer may just have been removed
    return result


async def update(request: web.Request) -> web.Response:
    state = _state(request)
    resource, namespace, name = _key(request)
    current = state.store.get(resource.plural, namespace, name)
    body, warnings = await _decoded(request, resource)
    return _warned(_json(_replace(state, resource, current, body, request.path.endswith("/status"))), warnings)


async def patch(request: web.Request) -> web.Response:
    state = _state(request)
    resource, namespace, name = _key(request)
    current = state.store.get(resource.plural, namespace, name)
    mode = field_validation.directive(request.query)
    raw = await request.read()
    body = field_validation.loads(raw) if raw else {}
    content_type = request.content_type or patching.MERGE
    patched = patching.apply(copy.deepcopy(current), body, content_type, openapi.model_name(resource))
    if not isinstance(patched, dict):
        raise ApiError(422, "Invalid", "the patch did not produce an object")
    merged = field_validation.plain(patched)
    patched, found = field_validation.check(merged, resource)
    found.errors[:0] = field_validation.duplicates(body)
    if found.errors and mode == field_validation.STRICT:  # the patch map for strategic merge, else the object
        strategic = content_type.startswith(patching.STRATEGIC)
        shown = field_validation.go_format(body) if strategic else json.dumps(merged, separators=(",", ":"))
        raise field_validation.patch_error(found, shown)
    result = _replace(state, resource, current, patched, request.path.endswith("/status"))
    if resource.plural == "nodes":
        state.schedule_soon()
    return _warned(_json(result), field_validation.warnings(found) if mode == field_validation.WARN else [])


async def delete(request: web.Request) -> web.Response:
    """DELETE with ``DeleteOptions`` from the query or the body (``propagationPolicy``,
    ``orphanDependents``, ``gracePeriodSeconds``, ``preconditions``); see ``deletion.py``."""
    state = _state(request)
    resource, namespace, name = _key(request)
    options = DeleteOptions.parse(request.query, await _body(request))
    answer = state.delete_object(resource.plural, namespace, name, options)
    if resource.plural == "pods" and options.grace_period_seconds == 0:
        await state.deleted(namespace, name)
    return _json(answer)


async def delete_collection(request: web.Request) -> web.Response:
    """``deletecollection``: DELETE on a list URL, as the generic registry's ``DeleteCollection``.

    The objects the selectors (``labelSelector``, ``fieldSelector``) match are each deleted with the
    request's ``DeleteOptions``; one already gone is skipped. The answer is the list as it was read
    before deleting (``PodList``, ``JobList``...: ``Store.DeleteCollection`` returns ``listObj``).
    Namespaces have no ``deletecollection`` (405, as the API server answers a verb it lacks).
    """
    state, resource = _state(request), _resource(request)
    namespace = request.match_info.get("namespace")
    if namespace is not None and not resource.namespaced:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if resource.plural in NO_DELETE_COLLECTION or (resource.namespaced and namespace is None):
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    if namespace is not None:
        state.store.get("namespaces", "", namespace)
    options = DeleteOptions.parse(request.query, await _body(request))
    items = copy.deepcopy(state.store.list(resource.plural, namespace, _matcher(request)))
    for item in items:
        metadata = item["metadata"]
        try:
            state.delete_object(resource.plural, metadata.get("namespace", ""), metadata["name"], options)
        except ApiError as error:
            if error.code != 404:  # deleted meanwhile is fine; any other error fails the request
                raise
    if resource.plural == "pods" and options.grace_period_seconds == 0:
        for item in items:
            await state.deleted(item["metadata"]["namespace"], item["metadata"]["name"])
    return _json(
        {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": {"resourceVersion": state.store.resource_version},
            "items": items,
        }
    )


async def status(request: web.Request) -> web.Response:
    resource, namespace, name = _key(request)
    return _json(_state(request).store.get(resource.plural, namespace, name))


# --- pods: log and eviction -----------------------------------------------------------------


def _int(request: web.Request, name: str) -> int | None:
    value = request.query.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise bad_request(f"{name} must be an integer") from None


async def pod_log(request: web.Request) -> web.StreamResponse:
    state = _state(request)
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    pod = state.store.get("pods", namespace, name)
    names = [c["name"] for c in pod["spec"].get("initContainers") or []] + [
        c["name"] for c in pod["spec"]["containers"]
    ]
    container = request.query.get("container")
    if container is None:
        if len(pod["spec"]["containers"]) > 1:
            raise bad_request(f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]")
        container = pod["spec"]["containers"][0]["name"]
    if container not in names:
        raise bad_request(f"container {container} is not valid for pod {name}")
    run = state.runs.get((namespace, name))
    node = pod["spec"].get("nodeName")
    if run is None and node and state.store.find("nodes", "", node) is None:  # the log went with its node
        raise not_found("Node", "nodes", node)  # the API server's proxy looks the node up first
    if run is None or (
        not run.containers[container].lines
        and run.containers[container].process is None
        and not run.containers[container].simulated
        and not run.containers[container].finished
    ):
        raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
    follow = request.query.get("follow") in TRUE
    timestamps = request.query.get("timestamps") in TRUE
    since_seconds, since_time, tail_lines = (
        _int(request, "sinceSeconds"),
        request.query.get("sinceTime"),
        _int(request, "tailLines"),
    )
    container_run = run.containers[container]
    first = log_lines(container_run, timestamps, since_seconds, since_time, tail_lines)
    sent = len(container_run.lines)  # taken with ``first``: what comes while it is written follows it
    if not follow:
        return web.Response(text="".join(first), content_type="text/plain")
    response = web.StreamResponse(headers={"Content-Type": "text/plain", "Transfer-Encoding": "chunked"})
    await start_stream(request, response)
    budget = request.get(CUT_AFTER)  # lines it may send before a cut fault closes it

    async def write(lines: list[str]) -> bool:
        nonlocal budget
        for line in lines:
            if budget is not None and budget <= 0:
                _cut(request)
                return False
            await response.write(line.encode())
            budget = None if budget is None else budget - 1
        return True

    try:
        if not await write(first):
            return response
        while not container_run.finished:
            changed = container_run.changed
            if len(container_run.lines) == sent:
                await changed.wait()
            # The new lines and their count together: a line that comes while they are written is next.
            more, sent = log_lines(container_run, timestamps, start=sent), len(container_run.lines)
            if not await write(more):
                return response
        if await write(log_lines(container_run, timestamps, start=sent)):
            await response.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return response


async def exec_command(request: web.Request) -> web.StreamResponse:
    """``pods/exec`` over WebSocket (``pod_exec.py``)."""
    return await pod_exec.pod_exec(request, _state(request))


async def eviction(request: web.Request) -> web.Response:
    state = _state(request)
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    state.store.get("pods", namespace, name)
    body = await _body(request)
    grace = ((body or {}).get("deleteOptions") or {}).get("gracePeriodSeconds") if isinstance(body, dict) else None
    state.background(state.evict(namespace, name, grace, fault=None))
    return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)


# --- emulator control -----------------------------------------------------------------------


async def control(request: web.Request) -> web.Response:
    """``POST /_emulator/{action}`` with JSON; ``GET /_emulator/faults`` lists what was injected,
    ``GET /_emulator/phase-times[?namespace=]`` when each pod reached each phase (``phase_clock``)."""
    state = _state(request)
    action = request.match_info["action"]
    if request.method == "GET":
        if action == "faults":
            return _json({"faults": state.faults})
        if action == "phase-times":
            return _json({"pods": state.phase_clock.times(request.query.get("namespace"))})
        raise ApiError(404, "NotFound", f"unknown emulator endpoint {action!r}")
    body = await _body(request)
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    if action == "preempt":
        result: Any = await state.preempt(
            body.get("namespace", "default"), body["pod"], body.get("grace_period_seconds")
        )
    elif action == "drain":
        result = {"evicted": await state.drain(body["node"])}
    elif action == "cordon":
        result = state.cordon(body["node"], body.get("unschedulable", True))
    elif action == "remove-node":
        result = {"deleted_pods": await state.remove_node(body["node"])}
    elif action == "finish":  # {"namespace", "pods": [...] or "pod", "exit_code"}: simulated workloads done
        namespace, code = body.get("namespace", "default"), body.get("exit_code", 0)
        pods = body.get("pods") if "pods" in body else [body.get("pod")]
        if isinstance(code, bool) or not isinstance(code, int) or not isinstance(pods, list):
            raise bad_request("finish takes 'pods' (a list of names) or 'pod', and an integer 'exit_code'")
        result = {"finished": {pod: state.finish(namespace, str(pod), code) for pod in pods}}
    elif action == "add-node":
        result = state.add_node(NodeSpec.from_dict(body))
    elif action == "api-fault":
        try:
            fault = state.api_faults.add(ApiFault.from_dict(body))
        except (TypeError, ValueError) as error:
            raise bad_request(str(error)) from None
        result = {"added": fault.__dict__}
    elif action == "clear-api-faults":
        state.api_faults.clear()
        result = {"cleared": True}
    else:
        raise ApiError(404, "NotFound", f"unknown emulator action {action!r}")
    return _json(result)


def build_app(state: ClusterState) -> web.Application:
    app = web.Application(middlewares=[_faults, _errors, _authorize], client_max_size=16 * 2**20)
    app[STATE_KEY] = state
    app[TOKENS_KEY] = rbac.Tokens()
    core = "/api/v1"
    batch = "/apis/{group:batch|rbac\\.authorization\\.k8s\\.io}/v1"
    app.router.add_get("/version", version)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", healthz)
    app.router.add_get("/openapi/v2", openapi_v2)
    app.router.add_get("/openapi/v3", openapi_v3)
    app.router.add_get("/openapi/v3/{path:.+}", openapi_v3)
    app.router.add_get("/api", api_versions)
    app.router.add_get("/apis", api_groups)
    for slash in ("", "/"):  # the generated clients ask for /api/v1/ (get_api_resources)
        app.router.add_get(core + slash, core_resources)
        app.router.add_get("/apis/batch/v1" + slash, batch_resources)
        app.router.add_get(f"/apis/{rbac.GROUP}/v1" + slash, rbac_resources)
    app.router.add_route("*", "/_emulator/{action}", control)
    app.router.add_get("/metrics", metrics)
    for prefix in (core, batch):
        namespaced = prefix + "/namespaces/{namespace}/{plural}"
        app.router.add_get(namespaced, list_or_watch)
        app.router.add_post(namespaced, create)
        app.router.add_delete(namespaced, delete_collection)
        for route in (namespaced + "/{name}", namespaced + "/{name}/status"):
            app.router.add_get(route, get if not route.endswith("status") else status)
            app.router.add_put(route, update)
            app.router.add_patch(route, patch)
        app.router.add_delete(namespaced + "/{name}", delete)
        app.router.add_get(prefix + "/{plural}", list_or_watch)
        app.router.add_post(prefix + "/{plural}", create)
        app.router.add_delete(prefix + "/{plural}", delete_collection)
        app.router.add_get(prefix + "/{plural}/{name}", get)
        app.router.add_put(prefix + "/{plural}/{name}", update)
        app.router.add_patch(prefix + "/{plural}/{name}", patch)
        app.router.add_delete(prefix + "/{plural}/{name}", delete)
    app.router.add_get(core + "/namespaces/{namespace}/pods/{name}/log", pod_log)
    app.router.add_post(core + "/namespaces/{namespace}/pods/{name}/eviction", eviction)
    app.router.add_post(core + "/namespaces/{namespace}/serviceaccounts/{name}/token", token_request)
    app.router.add_route("GET", core + "/namespaces/{namespace}/pods/{name}/exec", exec_command)
    app.router.add_route("POST", core + "/namespaces/{namespace}/pods/{name}/exec", exec_command)
    return app
