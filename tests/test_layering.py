"""No import circles inside the provider, beyond the listed ones that an issue is removing.

Two modules that import each other cannot be read, tested or moved one without the other, and a
circle that works today because one side imports lazily breaks the day someone hoists that import.
The graph is read from the source (``ast``), so it sees every import a reader sees: module level,
inside functions and under ``TYPE_CHECKING``. ``from P import x`` depends on the package ``P`` itself
(Python asks its namespace, and so its ``__init__`` and any module ``__getattr__``, for ``x`` first)
and on the submodule ``P.x`` when there is one; ``import P.x as x`` names the submodule only. So a
module inside a package whose ``__init__`` exports it lazily imports its siblings by their own path.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import airflow_gpu

#: Circles still present, each to be removed by the issue named with it. A circle found must lie
#: inside one of these, and each of these must be exactly what is left of it: shrink the list as
#: modules leave a circle, never grow it.
ALLOWED: dict[frozenset[str], str] = {
    # Issue 25 (Shape): the Kubernetes emulator's API server, cluster state and Job controller.
    # The package ``__init__`` (lazy ``KubernetesEmulator``) joins it because ``api``,
    # ``cluster_state`` and ``field_validation`` import their siblings through the package.
    frozenset(
        f"airflow_gpu.testing.kubernetes{name}"
        for name in (
            "",
            ".api",
            ".cluster_state",
            ".deletion",
            ".emulator",
            ".field_validation",
            ".images",
            ".job_controller",
            ".pod_exec",
        )
    ): "issue 25",
    # Issue 25 (Shape: operators/batch.py and operators/kubernetes.py back under 400 lines, what is
    # not translation in the shared core): the operators' helper modules annotate with the operator
    # class (``TYPE_CHECKING``) that imports them.
    frozenset(
        {
            "airflow_gpu.operators.batch",
            "airflow_gpu.operators.batch_deferral",
            "airflow_gpu.operators.batch_submission",
        }
    ): "issue 25",
    frozenset(
        {
            "airflow_gpu.operators.kubernetes",
            "airflow_gpu.operators.kubernetes_deferral",
            "airflow_gpu.operators.kubernetes_pod",
            "airflow_gpu.operators.kubernetes_profiler",
            "airflow_gpu.operators.kubernetes_reads",
            "airflow_gpu.operators.kubernetes_resume",
        }
    ): "issue 25",
    frozenset(
        {
            "airflow_gpu.operators.accelerate_kubernetes",
            "airflow_gpu.operators.training_job_deferral",
            "airflow_gpu.operators.training_job_reattach",
            "airflow_gpu.operators.training_success",
        }
    ): "issue 25",
    frozenset({"airflow_gpu.triggers.kubernetes", "airflow_gpu.triggers.pod_carry_on"}): "issue 25",
}


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under ``root`` by dotted name; a package is its ``__init__.py``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` (source at ``path``) imports, anywhere in it."""
    known = set(known)
    is_package = path.name == "__init__.py"

    def owner(dotted: str) -> str | None:  # the longest known module that ``dotted`` names or lies in
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    targets: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets |= {owner(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([source] if source else [])])
            targets.add(owner(source))
            targets |= {f"{source}.{alias.name}" for alias in node.names} & known
    return {t for t in targets if t is not None and t != name}


def circles(graph: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    found = modules(root, package)
    return {name: imports(name, path, found) for name, path in found.items()}


def provider_circles() -> list[frozenset[str]]:
    return circles(import_graph(Path(airflow_gpu.__path__[0]), "airflow_gpu"))


def test_no_import_circle_beyond_the_listed_ones() -> None:
    listed = frozenset().union(*ALLOWED)
    new = [sorted(c) for c in provider_circles() if not any(c <= allowed for allowed in ALLOWED)]
    newcomers = sorted(frozenset().union(*map(frozenset, new)) - listed)
    assert not new, (
        f"import circles {new} (not in any listed one: {newcomers}): move what both sides need into a module "
        "of its own, or import a sibling by its own path rather than through its package"
    )


def test_the_list_of_circles_is_what_is_left_of_them() -> None:
    found = provider_circles()
    for allowed, issue in ALLOWED.items():
        left = frozenset().union(*(c & allowed for c in found))
        assert left == allowed, f"gone from the circle of {issue}: {sorted(allowed - left)}; shrink ALLOWED"


def _package(root: Path, files: Mapping[str, str]) -> Path:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def test_the_graph_sees_deferred_and_type_checking_imports(tmp_path: Path) -> None:
    root = _package(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "driver.py": "from pkg import gang\n",
            "gang.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.driver import Driver\n",
            "nodes.py": "def f():\n    from . import plan\n",
            "plan.py": "import pkg.nodes as nodes\n",
            "alone.py": "import pkg.plan\nfrom pkg.nodes import f\n",
        },
    )
    graph = import_graph(root, "pkg")
    assert graph["pkg.driver"] == {"pkg", "pkg.gang"}
    assert graph["pkg.alone"] == {"pkg.plan", "pkg.nodes"}
    assert sorted(map(sorted, circles(graph))) == [["pkg.driver", "pkg.gang"], ["pkg.nodes", "pkg.plan"]]


def test_importing_a_sibling_through_a_package_that_exports_lazily_is_a_circle(tmp_path: Path) -> None:
    lazy_init = "def __getattr__(name):\n    from pkg.sub.emulator import Emulator\n    return Emulator\n"
    root = _package(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "sub/__init__.py": lazy_init,
            "sub/emulator.py": "from pkg.sub import nodes\n",
            "sub/nodes.py": "",
        },
    )
    assert circles(import_graph(root, "pkg")) == [frozenset({"pkg.sub", "pkg.sub.emulator"})]
    (root / "sub" / "emulator.py").write_text("import pkg.sub.nodes as nodes\n")
    assert circles(import_graph(root, "pkg")) == []
