"""The documentation site built as ``make docs`` builds it (``-W --keep-going``), once per test module.

``make test`` builds ``docs/_build/html`` just before the tests run, and building it again here cost
a worker about 15 s of CPU (autodoc imports Airflow and the providers), close to a minute on two
busy cores. So that build is used when it is newer than everything it is made from (the pages, the
docs' own code and images, the provider's sources that autodoc reads, the changelog it includes).
Otherwise the site is built into a temporary folder by a fresh Python process (Sphinx imports the
provider and Airflow through autodoc, and the test process keeps neither Sphinx's state nor its
warnings), so a test of the site never reads a stale one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
#: What ``make docs`` writes; Sphinx writes ``.buildinfo`` last-but-one, at the end of every build.
MAKE_DOCS_OUTPUT = DOCS / "_build" / "html"


def _sources() -> list[Path]:
    """Every file the site is made from."""
    docs = [p for p in DOCS.rglob("*") if p.is_file() and "_build" not in p.relative_to(DOCS).parts]
    # The how-to guides include example DAGs (and their training script) from dags/.
    dags = (REPO / "dags").rglob("*.py")
    return [
        *docs,
        *(REPO / "provider" / "airflow_gpu").rglob("*.py"),
        *dags,
        REPO / "CHANGELOG.rst",
        REPO / "README.md",
    ]


def fresh_make_docs_output() -> Path | None:
    """``docs/_build/html`` when a complete build there is newer than all of its sources, else None."""
    stamp = MAKE_DOCS_OUTPUT / ".buildinfo"
    if not (stamp.is_file() and (MAKE_DOCS_OUTPUT / "index.html").is_file()):
        return None
    built = stamp.stat().st_mtime
    newest = max((p.stat().st_mtime for p in _sources() if p.exists()), default=0.0)
    return MAKE_DOCS_OUTPUT if newest < built else None


def build_site(out: Path) -> Path:
    """The site: ``make docs``' output when fresh (read only), else built into ``out`` with warnings as
    errors; the build's output is the failure message."""
    fresh = fresh_make_docs_output()
    if fresh is not None:
        return fresh
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"sphinx-build failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return out
