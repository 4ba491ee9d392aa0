"""The report inside the Airflow UI's tab: the iframe's sandbox as Airflow's own UI bundle writes it,
and what a real browser (Debian's chromium, driven by Playwright) can click there.

The browser test serves, on one origin, a stand-in for the UI (a page holding the tab's iframe
with the sandbox read from the bundle, or ``allow-forms`` alone, Airflow's default for a view) and
the report app, whose access check is replaced by what core's does first: no ``_token`` cookie,
401 "Not authenticated". The cookie is set as Airflow's simple auth manager sets it (httponly,
SameSite=Lax). What it shows, against Airflow 3.3.2: in the real sandbox the links between the
report's pages work (same origin, signed in) but a ``target="_blank"`` link opens nothing, so the
framed pages show outside addresses as text; in an ``allow-forms`` frame the browser sends a
followed link cross-site without the cookie, and the page explains where to look instead.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import airflow
import pytest
import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from airflow_gpu.plugins.app import app, can_read_dag_xcom, xcom_reader
from airflow_gpu.plugins.document import TaskEntry
from airflow_gpu.plugins.urls import PREFIX, run_path, task_path
from airflow_gpu.testing.polling import wait_for
from tests.plugins.profiles import MemoryReader, document
from tests.programs import program

UI_ASSETS = Path(airflow.__file__).parent / "ui" / "dist" / "assets"
#: Airflow's view component takes ``sandbox`` from its caller (default ``allow-forms``); the plugin page passes one.
VIEW_CALL = re.compile(r"\{externalView:[\w$]+,sandbox:`([^`]*)`\}")
#: Where the stand-in serves the price list a document links to (an outside address).
EXTERNAL = "/price-list"


def tab_sandbox() -> str:
    """The ``sandbox`` attribute the Airflow UI installed here gives a plugin's tab iframe."""
    found: set[str] = {
        m for bundle in UI_ASSETS.glob("*.js") for m in VIEW_CALL.findall(bundle.read_text(errors="replace"))
    }
    assert len(found) == 1, f"the UI bundle's external view sandboxes: {found}"
    return found.pop()


def test_airflow_frames_a_plugin_tab_same_origin_without_popups() -> None:
    """The fact the framed pages rest on: links within the app work in the tab, new windows do not."""
    tokens = tab_sandbox().split()
    assert {"allow-same-origin", "allow-forms"} <= set(tokens)
    assert not {"allow-popups", "allow-top-navigation", "allow-top-navigation-by-user-activation"} & set(tokens)


def _stand_in() -> FastAPI:
    root = FastAPI()

    @root.get("/login")
    def login() -> Response:
        response = HTMLResponse("signed in")
        response.set_cookie("_token", "good", httponly=True, samesite="lax")  # as Airflow's simple auth manager
        return response

    @root.get("/ui", response_class=HTMLResponse)
    def ui(sandbox: str, src: str) -> str:
        return (
            f'<!doctype html><title>Airflow</title><iframe title="GPU Profile" sandbox="{sandbox}" src="{src}" '
            'style="width:1000px;height:800px"></iframe>'
        )

    @root.get(EXTERNAL, response_class=HTMLResponse)
    def prices() -> str:
        return "<title>prices</title>"

    root.mount(PREFIX, app)
    return root


def _signed_in(request: Request) -> None:
    if request.cookies.get("_token") != "good":
        raise HTTPException(401, "Not authenticated")  # what core's requires_access_dag answers without a token


@pytest.fixture
def server() -> Iterator[str]:
    """The stand-in UI and the report on one origin, in a thread of this process, on a free port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    origin = f"http://127.0.0.1:{listener.getsockname()[1]}"
    source = {**document(1)["cost"], "source": origin + EXTERNAL}
    entries = [TaskEntry("score", i, document(1, workload=f"score-{i}", cost=source)) for i in range(2)]
    app.dependency_overrides[can_read_dag_xcom] = _signed_in
    app.dependency_overrides[xcom_reader] = lambda: MemoryReader(entries)
    uvicorn_server = uvicorn.Server(uvicorn.Config(_stand_in(), log_level="warning"))
    thread = threading.Thread(target=uvicorn_server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: uvicorn_server.started, 20, "the stand-in server")
        yield origin
    finally:
        uvicorn_server.should_exit = True
        thread.join(20)
        listener.close()
        app.dependency_overrides.clear()


@pytest.mark.slow
def test_links_in_the_tab_frame_as_a_browser_follows_them(server: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    run = PREFIX + run_path("d", "r")
    chromium = program("chromium")  # never skipped: make test installs it, and a run without it must fail
    with sync_playwright() as playwright:
        # --no-sandbox: the tests run as root, where chromium's own sandbox refuses to start.
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(server + "/login")
            # The tab as Airflow 3.3.2 frames it: the report's links navigate the frame, signed in.
            page.goto(f"{server}/ui?sandbox={tab_sandbox()}&src={run}")
            frame = page.frame_locator('iframe[title="GPU Profile"]')
            frame.get_by_role("link", name="score [1]", exact=True).click()
            expect(frame.get_by_role("heading", name="GPU profile: score [1]")).to_be_visible()
            expect(frame.locator("figure.chart svg path").first).to_be_attached()
            # No allow-popups: the outside address is text to copy, not a link that would open nothing.
            expect(frame.locator("code.copy", has_text=server + EXTERNAL)).to_be_visible()
            expect(frame.locator('a[target="_blank"]')).to_have_count(0)
            frame.get_by_role("link", name="the whole run", exact=True).click()
            expect(frame.get_by_role("link", name="score [0]", exact=True)).to_be_visible()
            frame.get_by_role("link", name="JSON", exact=True).click()
            expect(frame.get_by_text('"run_id":"r"')).to_be_visible()
            # Opened on its own, the same page links the outside address, which opens in a new window.
            page.goto(server + PREFIX + task_path("d", "r", "score", 1))
            with page.expect_popup() as popup:
                page.locator(f'a[target="_blank"][href="{server}{EXTERNAL}"]').click()
            expect(popup.value).to_have_title("prices")
            # A frame without allow-same-origin: a followed link goes cross-site, without the cookie.
            page.goto(f"{server}/ui?sandbox=allow-forms&src={run}")
            frame.get_by_role("link", name="score [1]", exact=True).click()
            expect(frame.get_by_text("This page cannot open inside the Airflow tab")).to_be_visible()
            expect(frame.get_by_text("task score [1], and its GPU Profile tab")).to_be_visible()
        finally:
            browser.close()
