"""The report's routes through FastAPI's TestClient, mounted at /gpu-profile as the API server mounts it.

Two dependencies are overridden, both boundaries this provider owns: ``can_read_dag_xcom`` (core's
``requires_access_dag``, which needs an auth manager and the metadata database to say 200 or 403)
and ``xcom_reader`` (the database read), replaced by a reader over in-memory entries that records
what it was asked (``profiles.MemoryReader``). Without the access override an anonymous request
gets core's 401. The real 401/403/200 answers through a running Airflow are the shared stack's tests.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_gpu.plugins.app import (
    CONTENT_SECURITY_POLICY,
    app,
    can_read_dag_xcom,
    dag_run_json,
    task_instance_json,
    xcom_reader,
)
from airflow_gpu.plugins.document import TaskEntry, clean
from airflow_gpu.plugins.pages import FRAMED_LINK
from airflow_gpu.plugins.urls import PREFIX, run_path, task_path
from tests.plugins.profiles import PRICES_SOURCE, MemoryReader, document
from tests.properties import examples

RUN = "manual__2026-11-23T15:00:00+00:00"


def run_reader(entries: list[TaskEntry]) -> MemoryReader:
    """A reader of run ``RUN`` only."""
    return MemoryReader(entries, run_id=RUN)


@pytest.fixture
def reader() -> MemoryReader:
    return run_reader(
        [
            TaskEntry("train", -1, document(4, workload="train-pod")),
            *[TaskEntry("score", i, document(1, workload=f"score-{i}")) for i in range(3)],
            TaskEntry("flaky", -1, None, [{"action": "resubmit"}]),
        ]
    )


def _mounted() -> FastAPI:
    parent = FastAPI()
    parent.mount(PREFIX, app)
    return parent


@pytest.fixture
def client(reader: MemoryReader) -> Iterator[TestClient]:
    app.dependency_overrides[can_read_dag_xcom] = lambda: None
    app.dependency_overrides[xcom_reader] = lambda: reader
    try:
        yield TestClient(_mounted())
    finally:
        app.dependency_overrides.clear()


def _get(client: TestClient, path: str) -> Any:
    return client.get(PREFIX + path)


def test_the_task_page_decodes_the_ids_and_shows_the_profile(client: TestClient, reader: MemoryReader) -> None:
    response = _get(client, task_path("gpu dag", RUN, "train", -1))
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    # The page reads that one instance, nothing else of the run.
    assert reader.calls == [("entry", {"dag_id": "gpu dag", "run_id": RUN, "task_id": "train", "map_index": -1})]
    assert "train-pod" in response.text and "A10G:4" in response.text
    # Links between pages carry the mount point and the ids quoted again.
    assert f'href="{PREFIX}{run_path("gpu dag", RUN)}"' in response.text
    assert "/gpu-profile/dags/gpu%20dag/runs/manual__2026-11-23T15%3A00%3A00%2B00%3A00" in response.text


def test_the_uis_literal_map_index_reads_as_the_unmapped_instance(client: TestClient) -> None:
    response = client.get(f"{PREFIX}/dags/d/runs/{RUN}/tasks/train", params={"map_index": "{MAP_INDEX}"})
    assert response.status_code == 200 and "train-pod" in response.text


def test_a_mapped_task_lists_its_instances_or_shows_the_one_asked_for(client: TestClient, reader: MemoryReader) -> None:
    listing = _get(client, task_path("d", RUN, "score"))
    assert listing.status_code == 200 and "3 mapped instances" in listing.text
    assert 'tasks/score?map_index=2">score [2]</a>' in listing.text
    ids = {"dag_id": "d", "run_id": RUN, "task_id": "score"}
    assert reader.calls == [("entry", {**ids, "map_index": -1}), ("map_indexes", ids)]  # no document of any shard
    reader.calls.clear()
    shard = _get(client, task_path("d", RUN, "score", 1))
    assert "score-1" in shard.text and "<h1>GPU profile: score [1]</h1>" in shard.text
    assert reader.calls == [("entry", {**ids, "map_index": 1})]


def test_without_a_profile_the_page_is_the_empty_state_not_an_error(client: TestClient) -> None:
    for path in (task_path("d", RUN, "flaky"), task_path("d", RUN, "nope", 3), run_path("d", "no-run")):
        response = _get(client, path)
        assert response.status_code == 200
        assert "No GPU profile for this task instance." in response.text or "No task instance" in response.text


def test_a_bad_map_index_is_a_400(client: TestClient) -> None:
    assert client.get(f"{PREFIX}/dags/d/runs/r/tasks/t", params={"map_index": "x"}).status_code == 400
    assert client.get(f"{PREFIX}/api/dags/d/runs/r/tasks/t", params={"map_index": "-2"}).status_code == 400


def test_the_run_page_rolls_up_every_task_instance(client: TestClient, reader: MemoryReader) -> None:
    response = _get(client, run_path("d", RUN))
    assert response.status_code == 200
    assert reader.calls == [("run", {"dag_id": "d", "run_id": RUN})]  # summaries, not documents
    assert "score: 3 mapped instances, 0.30 GPU-hours" in response.text
    assert "<b>0.70</b><span>GPU-hours</span>" in response.text


def test_json_twins(client: TestClient) -> None:
    task = _get(client, task_path("d", RUN, "score", 2, api=True)).json()
    assert task["map_index"] == 2 and task["is_profile"] is True and task["profile"]["workload"] == "score-2"
    listing = _get(client, task_path("d", RUN, "score", api=True)).json()
    assert (listing["map_index"], listing["map_indexes"], listing["profile"]) == (None, [0, 1, 2], None)
    flaky = _get(client, task_path("d", RUN, "flaky", api=True)).json()
    assert (flaky["profile"], flaky["is_profile"], flaky["interruptions"]) == (None, False, 1)
    run = _get(client, run_path("d", RUN, api=True)).json()
    assert run["totals"]["gpu_hours"] == pytest.approx(0.7) and run["totals"]["interruptions"] == 1
    assert [(t["task_id"], t["map_index"]) for t in run["tasks"]] == [
        ("flaky", -1), ("score", 0), ("score", 1), ("score", 2), ("train", -1),
    ]  # fmt: skip


def test_anonymous_requests_get_401_from_airflows_own_check(reader: MemoryReader) -> None:
    """Only the reader is overridden: core's requires_access_dag refuses a request without a token."""
    app.dependency_overrides[xcom_reader] = lambda: reader
    try:
        client = TestClient(_mounted())
        for path in (task_path("d", RUN, "train"), run_path("d", RUN), run_path("d", RUN, api=True)):
            response = _get(client, path)
            assert response.status_code == 401 and response.json() == {"detail": "Not authenticated"}
    finally:
        app.dependency_overrides.clear()
    assert reader.calls == []  # refused before XCom is read


FRAMED = {"Sec-Fetch-Dest": "iframe"}  # what a browser sends for a page it loads into the UI's tab


def test_a_framed_page_shows_outside_addresses_as_text_and_keeps_its_own_links(client: TestClient) -> None:
    """The tab's sandbox has no allow-popups: a target=_blank link there opens nothing (test_frame_browser)."""
    link = f'<a href="{PRICES_SOURCE}" target="_blank" rel="noopener noreferrer">'
    for path in (task_path("d", RUN, "score", 1), run_path("d", RUN)):
        alone, framed = _get(client, path), client.get(PREFIX + path, headers=FRAMED)
        assert alone.headers["vary"] == framed.headers["vary"] == "Sec-Fetch-Dest"
        assert link in alone.text and 'target="_blank"' not in framed.text
        assert f'<code class="copy">{PRICES_SOURCE}</code>' in framed.text and FRAMED_LINK in framed.text
    # Links between the report's pages stay links in the frame: same origin, they navigate it signed in.
    framed_run = client.get(PREFIX + run_path("d", RUN), headers=FRAMED).text
    assert f'<a href="{PREFIX}{task_path("d", RUN, "score", 1)}">score [1]</a>' in framed_run
    framed_task = client.get(PREFIX + task_path("d", RUN, "score", 1), headers=FRAMED).text
    assert f'<a href="{PREFIX}{run_path("d", RUN)}">the whole run</a>' in framed_task


def test_a_framed_request_without_a_sign_in_gets_a_page_saying_where_to_look(reader: MemoryReader) -> None:
    """What a link followed in a frame without allow-same-origin meets: no cookie, core's 401, here as a page."""
    app.dependency_overrides[xcom_reader] = lambda: reader
    try:
        client = TestClient(_mounted())
        shard = client.get(PREFIX + task_path("d<i>", RUN, "score", 1), headers=FRAMED)
        run = client.get(PREFIX + run_path("d", RUN, api=True), headers=FRAMED)
        alone = _get(client, task_path("d", RUN, "score", 1))
    finally:
        app.dependency_overrides.clear()
    assert shard.status_code == run.status_code == alone.status_code == 401
    assert shard.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "cannot open inside the Airflow tab" in shard.text and "<i>" not in shard.text
    assert f"open DAG d&lt;i&gt;, its run {RUN}, task score [1], and its GPU Profile tab" in shard.text
    copy = f"http://testserver{PREFIX}{task_path('d<i>', RUN, 'score', 1)}"  # the ids percent-encoded, to paste
    assert f'<code class="copy">{copy}</code>' in shard.text and "%3Ci%3E" in copy
    assert f"open DAG d, its run {RUN}, and the run&#x27;s GPU Profile tab" in run.text
    assert alone.json() == {"detail": "Not authenticated"}  # scripts and pages opened on their own: core's answer
    assert reader.calls == []


@pytest.fixture(scope="module")
def started() -> Iterator[TestClient]:
    """One client whose event loop thread stays up across examples: a client used without ``with``
    starts a loop thread per request, nine tenths of the property test's time."""
    with TestClient(_mounted(), raise_server_exceptions=True) as client:
        yield client


@contextmanager
def _serving(started: TestClient, entries: list[TaskEntry]) -> Iterator[TestClient]:
    app.dependency_overrides[can_read_dag_xcom] = lambda: None
    app.dependency_overrides[xcom_reader] = lambda: run_reader(entries)
    try:
        yield started
    finally:
        app.dependency_overrides.clear()


#: Any JSON value, and what a JSON reader or Airflow's serde can hand over beside: NaN, infinities,
#: integers past float range, tuples, non-string keys, other types.
_odd = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
    | st.sampled_from([10**400, 2**1024, 5e-324, 1e308, -1e16, math.nan, -math.inf])
)  # fmt: skip
_values = st.recursive(
    _odd,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6) | st.integers(), inner, max_size=4)
        | st.just({1.5: set(), "t": datetime(2026, 1, 1, tzinfo=timezone.utc)})
    ),
    max_leaves=10,
)
_numbers = st.lists(_odd, max_size=12)


@st.composite
def _documents(draw: st.DrawFn) -> Any:
    """A whole value of any shape, or a profile with some fields (a series' columns included) replaced."""
    if draw(st.booleans()):
        return draw(_values)
    overrides: dict[str, Any] = draw(st.dictionaries(st.sampled_from([*document()]), _values))
    doc = document(draw(st.integers(0, 3)), **overrides)
    for entry in doc["series"] if isinstance(doc["series"], list) else []:
        if not isinstance(entry, dict):
            continue
        for name in draw(st.lists(st.sampled_from(["time", "gpu", "gpu_util", "fb_used", "power_usage"]))):
            entry[name] = draw(_numbers | _odd)
    return doc


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_documents(), _documents(), _values)
def test_any_document_answers_200_with_pages_and_strict_json(
    started: TestClient, train: Any, shard: Any, records: Any
) -> None:
    """A task can push anything as gpu_profile (or gpu_interruptions): every route answers, none with a 500."""
    entries = [TaskEntry("train", -1, train, records), TaskEntry("score", 0, shard), TaskEntry("score", 1, train)]
    with _serving(started, entries) as client:
        for path in (task_path("d", RUN, "train"), task_path("d", RUN, "score", 0), run_path("d", RUN)):
            for headers in ({}, FRAMED):
                response = client.get(PREFIX + path, headers=headers)
                assert response.status_code == 200 and response.text.startswith("<!doctype html>")
        for path in (task_path("d", RUN, "train", api=True), task_path("d", RUN, "score", 0, api=True)):
            body = _get(client, path).json()
            assert body["profile"] == json.loads(json.dumps(clean(entries[0 if "train" in path else 1]).profile))
        _get(client, run_path("d", RUN, api=True)).raise_for_status()
    # What the routes return encodes as Starlette's JSONResponse encodes it, whatever FastAPI does first.
    reader = run_reader(entries)
    for task_id in ("train", "score"):
        json.dumps(task_instance_json("d", RUN, task_id, reader, "0" if task_id == "score" else None), allow_nan=False)
    json.dumps(dag_run_json("d", RUN, reader), allow_nan=False)
