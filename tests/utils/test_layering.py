"""``airflow_gpu.utils`` sits below the hooks, operators and triggers, as the amazon provider's
``utils`` sits below its hooks: a utility that imported a hook would make every hook that uses it
a cycle away from itself, and would load boto3 for a caller that only wants a link or a log line."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_gpu.utils

#: The layers above ``utils``: a utility gets what it needs from them passed in.
ABOVE = ("airflow_gpu.hooks", "airflow_gpu.operators", "airflow_gpu.triggers")


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function or ``TYPE_CHECKING`` block."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def test_no_utility_imports_a_hook_an_operator_or_a_trigger() -> None:
    folder = Path(airflow_gpu.utils.__file__).parent
    modules = sorted(folder.glob("*.py"))
    assert len(modules) > 5, "the walk found no utilities: is the path right?"
    upward = {path.name: sorted(name for name in imported(path) if name.startswith(ABOVE)) for path in modules}
    assert {name: found for name, found in upward.items() if found} == {}
