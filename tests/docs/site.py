"""The documentation site built as ``make docs`` builds it (``-W --keep-going``), once per test module.

Built into a temporary folder by a fresh Python process (Sphinx imports the provider and Airflow
through autodoc, and the test process keeps neither Sphinx's state nor its warnings), so a test of
the site never reads a stale ``docs/_build``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def build_site(out: Path) -> Path:
    """Build the HTML site into ``out`` with warnings as errors; the build's output is the failure message."""
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"sphinx-build failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return out
