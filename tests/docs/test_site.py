"""The built documentation site as a reader meets it, in a real browser (Debian's chromium, driven
by Playwright, as the plugin's browser tests): every page loads without a script error, every
internal link (``<a href>``, its ``#fragment`` included) and image (``<img src>``) resolves, every
code block has its copy button, and the search page finds "H100". The site is opened from files,
as a downloaded copy of the docs is.

One browser and one page for the whole crawl: about forty loads of local files.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import pytest

from tests.docs.site import DOCS, build_site
from tests.programs import program

pytestmark = pytest.mark.slow

#: What each page reports about itself, in one evaluation: its links, images (loaded or not) and ids.
PAGE_FACTS = """() => ({
  links: [...document.querySelectorAll('a[href]')].map(a => a.href),
  images: [...document.querySelectorAll('img')].map(i => ({src: i.src, ok: i.complete && i.naturalWidth > 0})),
  ids: [...document.querySelectorAll('[id]')].map(e => e.id),
  blocks: document.querySelectorAll('div.highlight').length,
  copies: document.querySelectorAll('div.highlight button.copybtn').length,
})"""


@dataclass
class Crawl:
    """What the crawl found: pages by path, their ids, and every problem as one readable line."""

    pages: dict[Path, set[str]] = field(default_factory=dict)
    linked: set[Path] = field(default_factory=set)
    fragments: list[tuple[Path, Path, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_site(tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def page(site: Path) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    chromium = program("chromium")  # never skipped: make test installs it, and a run without it must fail
    with sync_playwright() as playwright:
        # --no-sandbox: the tests run as root, where chromium's own sandbox refuses to start.
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield browser.new_context().new_page()
        finally:
            browser.close()


def _local(url: str, site: Path) -> Path | None:
    """The file a ``file://`` address inside the site names; None for anything else (http, mailto)."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return None
    path = Path(unquote(parsed.path))
    return path if path.is_relative_to(site) else None


def crawl(page: object, site: Path) -> Crawl:
    """Open every HTML page of the site and follow every internal link and image from it."""
    found = Crawl()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))  # type: ignore[attr-defined]
    page.on("requestfailed", lambda request: errors.append(f"failed to load {request.url}"))  # type: ignore[attr-defined]
    queue = sorted(site.glob("*.html"))
    while queue:
        path = queue.pop()
        if path in found.pages:
            continue
        name = path.relative_to(site)
        if not path.is_file():
            found.problems.append(f"{name}: missing, linked from another page")
            found.pages[path] = set()
            continue
        errors.clear()
        page.goto(path.as_uri(), wait_until="load")  # type: ignore[attr-defined]
        facts = page.evaluate(PAGE_FACTS)  # type: ignore[attr-defined]
        found.problems += [f"{name}: {error}" for error in errors]
        found.pages[path] = set(facts["ids"])
        if facts["copies"] != facts["blocks"]:  # sphinx-copybutton adds one to every code block, on every page
            found.problems.append(f"{name}: {facts['blocks']} code blocks, {facts['copies']} copy buttons")
        for image in facts["images"]:
            if _local(image["src"], site) is not None and not image["ok"]:
                found.problems.append(f"{name}: image {image['src']} does not load")
        for link in facts["links"]:
            target, fragment = urldefrag(link)
            local = _local(target, site)
            if local is None:
                continue
            if local.is_dir():
                local = local / "index.html"
            if local != path:
                found.linked.add(local)
            if local.suffix == ".html":
                queue.append(local)
                if fragment:
                    found.fragments.append((path, local, unquote(fragment)))
            elif not local.is_file():
                found.problems.append(f"{name}: link to missing {local.relative_to(site)}")
    for source, target, fragment in found.fragments:
        if fragment not in found.pages.get(target, set()):
            found.problems.append(f"{source.relative_to(site)}: no #{fragment} in {target.relative_to(site)}")
    return found


def test_every_page_link_and_image_of_the_site_resolves(site: Path, page: object) -> None:
    found = crawl(page, site)
    assert not found.problems, "\n".join(found.problems)
    # Every page written in docs/ is built and reachable by a link: none is an orphan only search finds.
    written = {site / source.relative_to(DOCS).with_suffix(".html") for source in DOCS.rglob("*.rst")}
    written = {p for p in written if "_build" not in p.parts}
    assert written <= set(found.pages), sorted(str(p.relative_to(site)) for p in written - set(found.pages))
    assert written - {site / "index.html"} <= found.linked, sorted(
        str(p.relative_to(site)) for p in written - found.linked - {site / "index.html"}
    )
    # Dozens of links on a page mean the crawl really read them (an empty crawl would pass the checks above).
    assert len(found.fragments) > 50, len(found.fragments)


def test_search_finds_h100(site: Path, page: object) -> None:
    from playwright.sync_api import expect

    page.goto((site / "search.html").as_uri() + "?q=H100")  # type: ignore[attr-defined]
    results = page.locator("#search-results ul.search li")  # type: ignore[attr-defined]
    expect(results.first).to_be_visible(timeout=30_000)
    titles = results.locator("a").first.all_inner_texts()
    assert titles, "search results without links"
    hits = {Path(urlparse(href).path).name for href in results.locator("a").evaluate_all("as => as.map(a => a.href)")}
    assert "accelerators.html" in hits, hits


def test_code_blocks_have_copy_buttons_and_the_theme_has_dark_mode(site: Path, page: object) -> None:
    from playwright.sync_api import expect

    page.goto((site / "cli.html").as_uri())  # type: ignore[attr-defined]
    blocks = page.locator("div.highlight")  # type: ignore[attr-defined]
    assert blocks.count() > 0
    expect(page.locator("div.highlight button.copybtn")).to_have_count(blocks.count())  # type: ignore[attr-defined]
    # furo's switch cycles auto -> dark -> light; the page's <body data-theme> follows it.
    page.locator("button.theme-toggle:visible").first.click()  # type: ignore[attr-defined]
    page.locator("button.theme-toggle:visible").first.click()  # type: ignore[attr-defined]
    assert page.evaluate("document.body.dataset.theme") in {"dark", "light"}  # type: ignore[attr-defined]


def test_reference_links_the_official_operators_api_docs(site: Path) -> None:
    """The operators' bases and inherited arguments link to the providers' docs of the installed
    versions, through the inventories shipped in docs/_inventories (no network at build time)."""
    from importlib.metadata import version

    text = (site / "reference" / "operators.html").read_text()
    kubernetes = version("apache-airflow-providers-cncf-kubernetes")
    amazon = version("apache-airflow-providers-amazon")
    kpo = (
        f"https://airflow.apache.org/docs/apache-airflow-providers-cncf-kubernetes/{kubernetes}/_api/airflow/"
        "providers/cncf/kubernetes/operators/pod/index.html#airflow.providers.cncf.kubernetes.operators.pod."
        "KubernetesPodOperator"
    )
    batch = (
        f"https://airflow.apache.org/docs/apache-airflow-providers-amazon/{amazon}/_api/airflow/providers/amazon/"
        "aws/operators/batch/index.html#airflow.providers.amazon.aws.operators.batch.BatchOperator"
    )
    assert f'href="{kpo}"' in text
    assert f'href="{batch}"' in text
    # Airflow's own BaseOperator (task_id, retries, execution_timeout...): the Task SDK's API page.
    sdk = f"https://airflow.apache.org/docs/task-sdk/{version('apache-airflow-task-sdk')}/api.html#airflow.sdk.BaseOperator"
    assert f'href="{sdk}"' in text
