"""``SharedPodWatch`` in an event loop of this process against the Kubernetes emulator's HTTP API,
through cncf-kubernetes' ``AsyncKubernetesHook`` and ``kubernetes_asyncio`` (no fakes), with the
API faults a real API server produces: cut streams, 410 Expired, 403 on watch, 429."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.triggers.pod_watch import WATCH_LABEL, ClusterConnection, PodState, SharedPodWatch

# slow: imports cncf-kubernetes' async hook (seconds of CPU)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_api_backoff")]


def connection(emulator: KubernetesEmulator) -> ClusterConnection:
    return ClusterConnection(config_dict=yaml.safe_load(emulator.kubeconfig()))


def core(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))


def gpu_pod(api: client.CoreV1Api, name: str, script: str) -> None:
    container = {"name": "base", "image": "busybox", "command": ["sh", "-c", script]}
    api.create_namespaced_pod(
        "default",
        {"metadata": {"name": name, "labels": {WATCH_LABEL: "l4"}},
         "spec": {"restartPolicy": "Never", "containers": [container]}},
    )  # fmt: skip


async def until_final(watch: SharedPodWatch, name: str, timeout: float = 30) -> PodState:
    """The pod's states until it ends (phase Succeeded/Failed) or is deleted."""
    seen = 0

    async def follow() -> PodState:
        nonlocal seen
        while True:
            state = await watch.next_state(name, seen)
            seen = state.version
            phase = ((state.pod or {}).get("status") or {}).get("phase")
            if state.deleted or phase in ("Succeeded", "Failed"):
                return state

    return await asyncio.wait_for(follow(), timeout)


def run(body: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(body())


def test_one_list_and_one_watch_serve_every_pod_of_the_namespace(kubernetes_emulator: KubernetesEmulator) -> None:
    api = core(kubernetes_emulator)
    names = [f"shard-{i}" for i in range(6)]
    for name in names:
        gpu_pod(api, name, "sleep 600")
    api.create_namespaced_pod("default", {"metadata": {"name": "not-ours"},
        "spec": {"containers": [{"name": "base", "image": "busybox", "command": ["true"]}]}})  # fmt: skip

    def end_them() -> None:
        for name in names[:3]:
            kubernetes_emulator.preempt(name, grace_period_seconds=0)
        for name in names[3:]:
            api.delete_namespaced_pod(name, "default", grace_period_seconds=0)

    async def body() -> list[PodState]:
        watch = SharedPodWatch.get(connection(kubernetes_emulator), "default")
        waiting = [asyncio.create_task(until_final(watch, n)) for n in names]
        await asyncio.wait_for(watch.synced.wait(), 30)
        await asyncio.to_thread(end_them)  # while watched
        return list(await asyncio.gather(*waiting))

    states = run(body)
    assert not any(s.deleted for s in states[:3])
    # A deleted pod: gone, or first ended Failed by the kubelet with its deletionTimestamp set.
    assert all(s.deleted or (s.pod and s.pod["metadata"].get("deletionTimestamp")) for s in states[3:])
    assert all(s.pod is not None and s.pod["metadata"]["name"] == n for s, n in zip(states, names, strict=True))
    assert [s.pod["status"]["phase"] for s in states[:3] if s.pod] == ["Failed"] * 3
    assert kubernetes_emulator.api_requests("LIST", "pods") == 1
    assert kubernetes_emulator.api_requests("WATCH", "pods") == 1
    assert kubernetes_emulator.api_requests("GET", "pods") == 0
    assert not SharedPodWatch._loops  # ended with its event loop


def test_no_final_state_is_missed_across_cut_streams_expired_versions_and_a_restart(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    api = core(kubernetes_emulator)
    kubernetes_emulator.inject_api_fault(verb="watch", resource="pods", cut_after=1, times=2)

    async def body() -> tuple[PodState, PodState]:
        watch = SharedPodWatch.get(connection(kubernetes_emulator), "default")
        await asyncio.to_thread(gpu_pod, api, "first", "sleep 1; exit 0")
        first = await until_final(watch, "first")  # through cut streams
        await asyncio.to_thread(gpu_pod, api, "second", "sleep 1; exit 4")
        # The history goes (compaction) and the API server restarts: the next watch gets 410.
        await asyncio.to_thread(kubernetes_emulator.compact_history)
        await asyncio.to_thread(kubernetes_emulator.end_watches)
        return first, await until_final(watch, "second")

    first, second = run(body)
    assert first.pod is not None and first.pod["status"]["phase"] == "Succeeded"
    assert second.pod is not None and second.pod["status"]["phase"] == "Failed"
    assert kubernetes_emulator.api_faults_injected  # a stream was cut, and ridden out
    assert kubernetes_emulator.api_requests("LIST", "pods") >= 2  # listed again after 410


def test_without_watch_permission_it_says_so_once_and_lists_the_namespace(
    kubernetes_emulator: KubernetesEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    api = core(kubernetes_emulator)
    kubernetes_emulator.inject_api_fault(verb="watch", resource="pods", status=403, times=None)
    for name in ("a", "b", "c"):
        gpu_pod(api, name, "sleep 1")

    async def body() -> list[PodState]:
        watch = SharedPodWatch.get(connection(kubernetes_emulator), "default", poll_interval=0.2)
        return list(await asyncio.gather(*(until_final(watch, n) for n in ("a", "b", "c"))))

    with caplog.at_level(logging.WARNING, logger="airflow_gpu.triggers.pod_watch"):
        states = run(body)
    assert all(s.pod and s.pod["status"]["phase"] == "Succeeded" for s in states)
    warnings = [r.getMessage() for r in caplog.records if "does not grant `watch pods`" in r.getMessage()]
    assert len(warnings) == 1
    assert kubernetes_emulator.api_requests("GET", "pods") == 0  # one LIST per interval, never a GET per pod
    assert kubernetes_emulator.api_requests("WATCH", "pods") == 1


def test_a_pod_deleted_before_anyone_watched_is_reported_gone_and_throttling_is_waited_out(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    api = core(kubernetes_emulator)
    kubernetes_emulator.inject_api_fault(verb="list", resource="pods", status=429, retry_after=0.2, times=1)

    async def body() -> PodState:
        watch = SharedPodWatch.get(connection(kubernetes_emulator), "default")
        return await until_final(watch, "never-existed")

    state = run(body)
    assert state.deleted and state.pod is None
    assert kubernetes_emulator.api_requests("LIST", "pods") == 2  # the 429, then the list
    assert kubernetes_emulator.api_requests("GET", "pods") == 1  # the one look-up
    del api


def test_the_operators_kubeconfig_replaces_the_connections_file_as_the_sync_hook_does(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """KPO with ``config_file`` and a connection naming ``kube_config_path``: the worker's sync hook
    uses the file; ``AsyncKubernetesHook`` would refuse both as mutually exclusive."""
    both = ClusterConnection(
        kubernetes_conn_id="kubernetes_default",
        connection_extras={"kube_config_path": "/nonexistent/config", "namespace": "default"},
        config_dict=yaml.safe_load(kubernetes_emulator.kubeconfig()),
    )

    async def body() -> int:
        async with both.hook().get_conn() as api:
            from kubernetes_asyncio.client import CoreV1Api

            return len((await CoreV1Api(api).list_node()).items)

    assert asyncio.run(body()) == 4


def test_a_group_hears_of_every_pod_with_its_label_made_before_or_after_it_was_held(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """The pods of a training Job: their names are the Job controller's, so a trigger holds their label."""
    api = core(kubernetes_emulator)

    def labelled(name: str, script: str, group: str) -> None:
        container = {"name": "base", "image": "busybox", "command": ["sh", "-c", script]}
        api.create_namespaced_pod("default", {
            "metadata": {"name": name, "labels": {WATCH_LABEL: "l4", "airflow-gpu/training-job": group}},
            "spec": {"restartPolicy": "Never", "containers": [container]}})  # fmt: skip

    labelled("before", "sleep 600", "job-a")
    labelled("stranger", "sleep 600", "job-b")

    async def body() -> tuple[dict[str, PodState], list[str]]:
        watch = SharedPodWatch.get(connection(kubernetes_emulator), "default")
        watch.hold_group("airflow-gpu/training-job", "job-a")
        await asyncio.wait_for(watch.synced.wait(), 30)
        version, members = await watch.next_group("airflow-gpu/training-job", "job-a")
        assert set(members) == {"before"}
        await asyncio.to_thread(labelled, "after", "sleep 1", "job-a")
        await asyncio.to_thread(api.delete_namespaced_pod, "before", "default", grace_period_seconds=0)
        while not (members.get("before") and members["before"].deleted and "after" in members
                   and (members["after"].pod or {}).get("status", {}).get("phase") == "Succeeded"):  # fmt: skip
            version, members = await asyncio.wait_for(
                watch.next_group("airflow-gpu/training-job", "job-a", version), 30
            )
        watch.release_group("airflow-gpu/training-job", "job-a")
        return members, sorted(watch.states)

    members, kept = run(body)
    assert set(members) == {"before", "after"} and members["before"].pod is not None  # gone, with its last state
    # Released: the group's pods, gone or ended, are not kept; a running pod of the label stays known
    # (a trigger that comes for it later needs no GET).
    assert kept == ["stranger"]
    assert kubernetes_emulator.api_requests("GET", "pods") == 0


def simulated_pods(api: client.CoreV1Api, count: int) -> list[str]:
    """``count`` pods with the watch label and no process each (``simulated.local`` images), settled; each
    about 8 KB of JSON, as a real pod with its managed fields and a training container's environment is."""
    from airflow_gpu.testing.polling import wait_for

    names = [f"shard-{i:04d}" for i in range(count)]
    env = [{"name": "SIMULATED_SECONDS", "value": "3600"}]
    env += [{"name": f"TRAINING_SETTING_{i}", "value": f"value-{i}-" + "x" * 40} for i in range(60)]
    container = {"name": "base", "image": "simulated.local/shard", "env": env}
    annotations = {f"example.com/note-{i}": "y" * 40 for i in range(40)}
    for name in names:
        body = {"metadata": {"name": name, "labels": {WATCH_LABEL: "cpu"}, "annotations": annotations},
                "spec": {"restartPolicy": "Never", "containers": [container]}}  # fmt: skip
        api.create_namespaced_pod("default", body, _preload_content=False).drain_conn()

    def running() -> bool:
        listed = api.list_namespaced_pod("default", label_selector=WATCH_LABEL, _preload_content=False)
        return all(p["status"].get("phase") == "Running" for p in json.loads(listed.data)["items"])

    wait_for(running, timeout=120)
    return names


async def longest_stall(work: Callable[[], Awaitable[Any]]) -> float:
    """The longest the event loop went without running a task that asks for a turn every millisecond."""
    worst, done = 0.0, False

    async def tick() -> None:
        nonlocal worst
        while not done:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - before)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    try:
        await work()
    finally:
        done = True
        await ticker
    return worst


@pytest.mark.slow  # 2,000 pods in the scale emulator: about 10 s on two cores
def test_a_list_of_thousands_of_pods_comes_in_pages_that_do_not_hold_the_loop(
    kubernetes_scale_emulator: Callable[..., KubernetesEmulator], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_gpu.triggers import list_watch

    emulator = kubernetes_scale_emulator(nodes=100)  # 30 CPU nodes, 110 pods each
    names = simulated_pods(core(emulator), 2000)
    link = connection(emulator)

    async def listed(watch: SharedPodWatch) -> None:
        async with link.client() as api:
            await watch._list(api)
        assert sorted(watch.states) == names  # every pod, kept (no GET for a trigger that comes later)

    async def body() -> tuple[list[float], list[float], int, int]:
        whole, paged, lists = [], [], []
        await listed(SharedPodWatch(link, "default"))  # the client's first use (its configuration, imports)
        for _ in range(3):  # alternately, so that a busy machine weighs on both alike
            with monkeypatch.context() as old:  # the list before pages: one body, parsed in the loop
                old.setattr(list_watch, "PAGE_SIZE", 10_000)
                old.setattr(list_watch, "PARSE_IN_THREAD_BYTES", 1 << 40)
                before = emulator.api_requests("LIST", "pods")
                whole.append(await longest_stall(lambda: listed(SharedPodWatch(link, "default"))))
                lists.append(emulator.api_requests("LIST", "pods") - before)
            before = emulator.api_requests("LIST", "pods")
            paged.append(await longest_stall(lambda: listed(SharedPodWatch(link, "default"))))
            lists.append(emulator.api_requests("LIST", "pods") - before)
        return whole, paged, lists[0], lists[1]

    whole, paged, unpaged_lists, paged_lists = run(body)
    assert (unpaged_lists, paged_lists) == (1, 4)  # 2,000 pods in pages of 500
    # The longest stall of a paged list is a fraction of the one of the whole list, in the same process.
    # Each side's least of three: other work on the machine only ever lengthens a stall, so the least is
    # the one nearest to the list's own (a median of three failed when other tests loaded both cores).
    print(f"longest stalls: whole {whole}, paged {paged}")
    assert min(paged) < min(whole) / 2, (whole, paged)


def test_a_list_whose_snapshot_expires_between_pages_starts_again_and_misses_nothing(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two pages etcd compacts the first page's revision: the next page is ``410 Expired``, and
    the list starts again from the first page (a consistent list), with the pod made meanwhile."""
    from airflow_gpu.triggers import list_watch

    sync_api = core(kubernetes_emulator)
    for name in ("a", "b", "c", "d", "e"):
        gpu_pod(sync_api, name, "sleep 600")
    monkeypatch.setattr(list_watch, "PAGE_SIZE", 2)
    request = list_watch.ListWatch._request
    compacted: list[str] = []

    async def compacting(self: list_watch.ListWatch, api: Any, selector: str | None = None, **params: Any) -> Any:
        if params.get("_continue") and not compacted:  # a pod made, then the history compacted, before page 2
            await asyncio.to_thread(gpu_pod, sync_api, "late", "sleep 600")
            compacted.append(await asyncio.to_thread(kubernetes_emulator.compact_history))
        return await request(self, api, selector, **params)

    monkeypatch.setattr(list_watch.ListWatch, "_request", compacting)

    async def body() -> list[str]:
        watch = SharedPodWatch(connection(kubernetes_emulator), "default")
        async with watch.connection.client() as client_api:
            await watch._list(client_api)
        return sorted(watch.states)

    assert run(body) == ["a", "b", "c", "d", "e", "late"]
    assert compacted
    metrics = urllib.request.urlopen(f"{kubernetes_emulator.url}/metrics").read().decode()
    assert 'apiserver_request_total{code="410",resource="pods",subresource="",verb="LIST"} 1' in metrics
    # Page 1, the expired page 2, then pages of 2 of the six pods.
    assert kubernetes_emulator.api_requests("LIST", "pods") == 2 + 3
    assert kubernetes_emulator.api_requests("GET", "pods") == 0


def simulated_pod(api: client.CoreV1Api, name: str, labelled: bool = True, **more: str) -> None:
    """A pod with no process (``simulated.local``) that runs an hour unless ``finish`` ends it."""
    container = {"name": "base", "image": "simulated.local/x", "env": [{"name": "SIMULATED_SECONDS", "value": "3600"}]}
    labels = ({WATCH_LABEL: "l4"} if labelled else {}) | more
    api.create_namespaced_pod("default", {"metadata": {"name": name, "labels": labels},
                                          "spec": {"restartPolicy": "Never", "containers": [container]}})  # fmt: skip


def between_pages(
    monkeypatch: pytest.MonkeyPatch, act: Callable[[], Awaitable[None]], page_size: int = 2
) -> list[bool]:
    """Run ``act`` once, before the list's second page is asked for (pages of ``page_size``); the list
    flags it did."""
    from airflow_gpu.triggers import list_watch

    monkeypatch.setattr(list_watch, "PAGE_SIZE", page_size)
    request = list_watch.ListWatch._request
    done: list[bool] = []

    async def between(self: list_watch.ListWatch, api: Any, selector: str | None = None, **params: Any) -> Any:
        if params.get("_continue") and not done:
            done.append(True)
            await act()
        return await request(self, api, selector, **params)

    monkeypatch.setattr(list_watch.ListWatch, "_request", between)
    return done


#: The label a training Job's pods carry (``utils.training_job``), a group the watch holds.
JOB_LABEL = "airflow-gpu/training-job"


def test_what_look_ups_hear_between_a_lists_pages_is_not_undone_by_the_list(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two pages of a list (a relist after 410, a poll without watch permission) the triggers'
    look-ups go on: a pod made after the first page's snapshot, found by a GET, is in no page ("no
    objects created, modified, or deleted after the first request is issued will be included in any
    subsequent continued requests", the API's ``continue``), and must not be recorded deleted when the
    list ends (its trigger would report a running pod gone, or a spot run start a second one), nor one
    a training Job's group LIST found; a pod a GET found gone (404) must not come back from a later
    page of the older snapshot.

    No fake: the emulator's paged LIST, the look-ups' real GETs; the test runs the look-ups itself
    where the triggerer's loop would run them, between two pages."""
    api = core(kubernetes_emulator)
    for name in "abcde":
        simulated_pod(api, name)

    def delete_d() -> None:
        from airflow_gpu.testing.polling import wait_for

        api.delete_namespaced_pod("d", "default", grace_period_seconds=0)

        def gone() -> bool:
            try:
                api.read_namespaced_pod("d", "default")
            except client.ApiException as error:
                return error.status == 404
            return False

        wait_for(gone, timeout=30)

    async def body() -> dict[str, PodState]:
        watch = SharedPodWatch(connection(kubernetes_emulator), "default")
        watch.waiters.update(late=1, d=1)  # triggers wait on them
        watch.groups[(JOB_LABEL, "job-a")] = 1  # and on a training Job's pods

        async def meanwhile() -> None:
            await asyncio.to_thread(simulated_pod, api, "late")  # made after the snapshot
            await asyncio.to_thread(simulated_pod, api, "late-worker", **{JOB_LABEL: "job-a"})
            await asyncio.to_thread(delete_d)  # on a page not read yet, gone now
            await watch._look_up("late")
            await watch._look_up("d")
            await watch._look_up_group(JOB_LABEL, "job-a")
            assert not watch.states["late"].deleted and watch.states["d"].deleted
            assert not watch.states["late-worker"].deleted

        done = between_pages(monkeypatch, meanwhile)
        async with watch.connection.client() as client_api:
            await watch._list(client_api)
        assert done
        return watch.states

    states = run(body)
    assert not states["late"].deleted, f"the list recorded a live pod as deleted: {states['late']}"
    assert not states["late-worker"].deleted, "the list recorded a live pod of a held group as deleted"
    assert states["d"].deleted, f"a page of the older snapshot brought a deleted pod back: {states['d']}"
    assert not any(states[n].deleted for n in "abce")


def test_a_pod_changed_between_a_lists_pages_reaches_its_trigger_through_the_watch(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every page is read at the first page's ``resourceVersion``: a pod that ends between two pages is
    listed running (on a page read before, or as the snapshot had it on a page read after), and only the
    watch opened from the list's ``resourceVersion`` tells its trigger that it ended (no compaction, no
    relist). The emulator's pages are short (``set_short_pages``: only the matches among ``limit``
    keys, an empty one with ``continue`` between pods without the label), as the API's ``limit``
    allows. No fake besides running the change between two pages."""
    from airflow_gpu.testing.polling import wait_for

    api = core(kubernetes_emulator)
    for name in ("a", "b", "b-x", "b-y", "c", "d", "e"):  # pages of 2 keys: [a b] [] [c d] [e]
        simulated_pod(api, name, labelled=name in "abcde")

    def running() -> bool:
        return all(p.status.phase == "Running" for p in api.list_namespaced_pod("default").items)

    wait_for(running, timeout=60)
    kubernetes_emulator.set_short_pages()

    async def end_a_and_e() -> None:  # "a" was on the first page; "e" is on the last
        await asyncio.to_thread(kubernetes_emulator.finish, "a", "e")

    async def body() -> tuple[PodState, PodState, list[bool]]:
        done = between_pages(monkeypatch, end_a_and_e)
        watch = SharedPodWatch.get(connection(kubernetes_emulator), "default")
        a, e = await asyncio.gather(until_final(watch, "a"), until_final(watch, "e"))
        return a, e, done

    before = kubernetes_emulator.api_requests("LIST", "pods")
    a, e, done = run(body)
    assert done
    assert [s.pod and s.pod["status"]["phase"] for s in (a, e)] == ["Succeeded", "Succeeded"]
    assert kubernetes_emulator.api_requests("LIST", "pods") - before == 4  # one list, of four pages
    assert kubernetes_emulator.api_requests("WATCH", "pods") == 1
    assert kubernetes_emulator.api_requests("GET", "pods") == 0
