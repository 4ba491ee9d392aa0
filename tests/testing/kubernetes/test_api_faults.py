"""The emulator's API faults and ``/metrics``, through the unmodified ``kubernetes`` client and raw HTTP.

Expectations come from the API server's documented behaviour: a 429 carries ``Retry-After`` and a
``Status`` with ``reason: TooManyRequests`` and ``details.retryAfterSeconds``; a 403 is a ``Status``
with ``reason: Forbidden``; ``apiserver_request_total`` counts by verb, resource, subresource and code.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from airflow_gpu.testing.kubernetes.api_faults import ApiFault
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.testing.kubernetes.conftest import phase_is, pod_manifest, wait_for


def test_throttling_answers_429_as_many_times_as_asked(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    kubernetes_emulator.inject_api_fault(verb="list", resource="pods", status=429, times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as raised:
            core.list_namespaced_pod("default")
        body = json.loads(raised.value.body)
        assert (raised.value.status, body["kind"], body["reason"]) == (429, "Status", "TooManyRequests")
    assert core.list_namespaced_pod("default").items == []  # spent: the next one is answered
    core.list_node()  # another resource: never matched
    assert kubernetes_emulator.api_requests("LIST", "pods") == 3
    assert [f["status"] for f in kubernetes_emulator.api_faults_injected] == [429, 429]


def test_retry_after_is_sent_and_the_sync_client_waits_it_out(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    """urllib3 (under the sync client) retries a 429 or 503 that carries ``Retry-After``, 3 times at most."""
    kubernetes_emulator.inject_api_fault(verb="list", resource="nodes", status=429, retry_after=1, times=1)
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(kubernetes_emulator.url + "/api/v1/nodes", timeout=10)
    assert raised.value.code == 429 and raised.value.headers["Retry-After"] == "1"
    assert json.loads(raised.value.read())["details"]["retryAfterSeconds"] == 1
    kubernetes_emulator.inject_api_fault(verb="list", resource="nodes", status=503, retry_after=1, times=1)
    assert len(core.list_node().items) == 4
    assert kubernetes_emulator.api_requests("LIST", "nodes") == 3  # the raw one, the 503, then 200


def test_metrics_count_requests_by_verb_resource_subresource_and_code(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    kubernetes_emulator.inject_api_fault(verb="get", resource="pods", name="counted", status=503, times=1)
    core.create_namespaced_pod("default", pod_manifest("counted", ["sh", "-c", "echo hi"]))
    with pytest.raises(ApiException) as raised:
        core.read_namespaced_pod("counted", "default")
    assert raised.value.status == 503 and json.loads(raised.value.body)["reason"] == "ServiceUnavailable"
    wait_for(phase_is(core, "counted", "Succeeded"))
    core.read_namespaced_pod_log("counted", "default")
    with pytest.raises(ApiException):
        core.read_namespaced_pod("missing", "default")
    text = urllib.request.urlopen(kubernetes_emulator.url + "/metrics", timeout=10).read().decode()
    samples = {
        line.rsplit(" ", 1)[0]: int(line.rsplit(" ", 1)[1]) for line in text.splitlines() if not line.startswith("#")
    }
    assert samples['apiserver_request_total{code="201",resource="pods",subresource="",verb="POST"}'] == 1
    assert samples['apiserver_request_total{code="503",resource="pods",subresource="",verb="GET"}'] == 1
    assert samples['apiserver_request_total{code="404",resource="pods",subresource="",verb="GET"}'] == 1
    assert samples['apiserver_request_total{code="200",resource="pods",subresource="log",verb="GET"}'] == 1
    assert "# TYPE apiserver_request_total counter" in text


def test_a_forbidden_watch_is_a_403_status_while_list_still_works(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    kubernetes_emulator.inject_api_fault(verb="watch", resource="pods", status=403, times=None)
    with pytest.raises(ApiException) as raised:
        next(iter(watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=5)))
    assert raised.value.status == 403 and json.loads(raised.value.body)["reason"] == "Forbidden"
    assert core.list_namespaced_pod("default").items == []
    kubernetes_emulator.clear_api_faults()
    core.create_namespaced_pod("default", pod_manifest("seen", ["sh", "-c", "exit 0"]))
    event = next(iter(watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=10)))
    assert event["object"].metadata.name == "seen"  # allowed again


def test_a_reset_connection_gets_no_answer_at_all(kubernetes_emulator: KubernetesEmulator) -> None:
    kubernetes_emulator.inject_api_fault(verb="list", resource="nodes", status=0, times=1)
    connection = http.client.HTTPConnection(kubernetes_emulator.host, kubernetes_emulator.port, timeout=10)
    connection.request("GET", "/api/v1/nodes")
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
        connection.getresponse()
    nodes = json.loads(urllib.request.urlopen(kubernetes_emulator.url + "/api/v1/nodes", timeout=10).read())
    assert nodes["kind"] == "NodeList"


def test_a_cut_watch_stream_ends_mid_way_and_a_new_one_resumes_from_its_resource_version(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    """ConfigMaps, which nothing changes behind the test's back: the events are exactly what it made."""
    for name in ("a", "b", "c"):
        core.create_namespaced_config_map("default", {"metadata": {"name": name}, "data": {"k": name}})
    kubernetes_emulator.inject_api_fault(verb="watch", resource="configmaps", cut_after=2, times=1)
    response = core.list_namespaced_config_map("default", watch=True, _preload_content=False, timeout_seconds=30)
    lines = []
    with pytest.raises(ProtocolError):  # the chunked body ends without its last chunk
        for line in response.stream():
            lines.append(line)
    events = [json.loads(line) for line in b"".join(lines).splitlines() if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a"), ("ADDED", "b")]
    # A watch from the last resourceVersion seen goes on where the cut one stopped: c, and nothing twice.
    last = events[-1]["object"]["metadata"]["resourceVersion"]
    resumed = watch.Watch()
    names = []
    for event in resumed.stream(core.list_namespaced_config_map, "default", resource_version=last, timeout_seconds=10):
        names.append(event["object"].metadata.name)
        resumed.stop()
    assert names == ["c"]


def test_a_cut_log_stream_sends_that_many_lines(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    core.create_namespaced_pod("default", pod_manifest("talker", ["sh", "-c", "seq 1 10"]))
    wait_for(phase_is(core, "talker", "Succeeded"))
    kubernetes_emulator.inject_api_fault(resource="pods/log", cut_after=3, times=1)
    assert core.read_namespaced_pod_log("talker", "default", _preload_content=False).data.split() == [
        str(i).encode() for i in range(1, 11)
    ]  # not a stream: a cut fault waits for the next followed read
    response = core.read_namespaced_pod_log("talker", "default", follow=True, _preload_content=False)
    received = b""
    with pytest.raises(ProtocolError):  # the connection drops without the final chunk
        for chunk in response.stream():
            received += chunk
    assert received.split() == [b"1", b"2", b"3"]


def test_log_follow_sends_every_line_of_a_burst_once_in_order(core: client.CoreV1Api) -> None:
    """Lines that come while earlier ones wait on a slow reader are sent next, never skipped."""
    pad = "x" * 200
    script = f"for i in $(seq 1 10); do seq -f '%g {pad}' $((i*100+1)) $((i*100+100)); sleep 0.02; done"
    core.create_namespaced_pod("default", pod_manifest("burst", ["sh", "-c", script]))
    wait_for(phase_is(core, "burst", "Running", "Succeeded"))
    response = core.read_namespaced_pod_log("burst", "default", follow=True, _preload_content=False)
    chunks = []
    for chunk in response.stream(4096):
        chunks.append(chunk)
        if len(chunks) % 16 == 0:
            time.sleep(0.01)  # time is under test: a slow reader, the server waits on it
    received = [line.split()[0] for line in b"".join(chunks).decode().splitlines()]
    assert [int(x) for x in received] == list(range(101, 1101))


def test_a_bad_fault_is_refused_naming_the_field(kubernetes_emulator: KubernetesEmulator) -> None:
    request = urllib.request.Request(
        kubernetes_emulator.url + "/_emulator/api-fault",
        data=json.dumps({"verb": "list", "sttaus": 429}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    assert raised.value.code == 400 and "sttaus" in raised.value.read().decode()
    with pytest.raises(ValueError, match="'fetch' is not an RBAC verb"):
        ApiFault(verb="fetch")
    with pytest.raises(ValueError, match="status 418"):
        ApiFault(status=418)


def test_a_watch_from_a_compacted_version_gets_410_expired(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    core.create_namespaced_pod("default", pod_manifest("old", ["sh", "-c", "exit 0"]))
    before = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod_manifest("new", ["sh", "-c", "exit 0"]))
    kubernetes_emulator.compact_history()
    response = core.list_namespaced_pod(
        "default", watch=True, resource_version=before, timeout_seconds=5, _preload_content=False
    )
    events = [json.loads(line) for line in response.data.splitlines() if line.strip()]
    assert [e["type"] for e in events] == ["ERROR"]
    assert (events[0]["object"]["code"], events[0]["object"]["reason"]) == (410, "Expired")
    with pytest.raises(ApiException) as raised:  # the client library turns it into an exception
        list(watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=before, timeout_seconds=5))
    assert raised.value.status == 410
    # Listing again gives a version to watch from.
    fresh = core.list_namespaced_pod("default").metadata.resource_version
    kubernetes_emulator.set_bookmark_interval(0.1)
    events = list(
        watch.Watch().stream(
            core.list_namespaced_pod,
            "default",
            label_selector="app=quiet",  # nothing changes there: only bookmarks come
            resource_version=fresh,
            timeout_seconds=1,
            allow_watch_bookmarks=True,
        )
    )
    assert len(events) >= 3 and {e["type"] for e in events} == {"BOOKMARK"}
    assert all(int(e["raw_object"]["metadata"]["resourceVersion"]) >= int(fresh) for e in events)


def test_ending_every_watch_ends_the_streams_cleanly(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    response = core.list_namespaced_pod("default", watch=True, timeout_seconds=30, _preload_content=False)
    threading.Timer(0.3, kubernetes_emulator.end_watches).start()
    assert response.data == b""  # the whole (empty) body: the server ended it, long before its timeout


def test_a_served_request_can_lose_its_response(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    """``served=True``: the create is carried out, then the connection is reset, as a load balancer drops a
    response after etcd wrote; the client hears nothing, and its retry meets ``409 AlreadyExists``."""
    kubernetes_emulator.inject_api_fault(verb="create", resource="pods", status=0, served=True, times=1)
    with pytest.raises(ProtocolError):
        core.create_namespaced_pod("default", pod_manifest("unheard", ["sh", "-c", "sleep 30"]))
    assert core.read_namespaced_pod("unheard", "default").metadata.name == "unheard"
    with pytest.raises(ApiException) as raised:
        core.create_namespaced_pod("default", pod_manifest("unheard", ["sh", "-c", "sleep 30"]))
    assert raised.value.status == 409
    with pytest.raises(ValueError, match="status 0"):
        ApiFault(status=503, served=True)
