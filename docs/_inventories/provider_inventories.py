"""Write the intersphinx inventories of the official providers' and the Task SDK's API docs, from the
installed packages.

``docs/conf.py`` links the reference pages to Airflow's provider docs through intersphinx and reads
these files, shipped in the repository, so that ``make docs`` (``-W``) needs no network. They were
written by this script, not downloaded: the build machines reach no documentation host. Airflow
publishes each provider's API with sphinx-autoapi, one page per module,
``<base>/_api/<module path>/index.html#<dotted name>``; this script lists the public modules,
classes, exceptions, functions and methods of the installed provider (read with ``ast``, nothing
imported) at those addresses, under the installed version's base URL.

Refresh, after a provider upgrade (or to use the published files where the host is reachable)::

    .venv/bin/python docs/_inventories/provider_inventories.py
    # or: curl -o docs/_inventories/cncf-kubernetes.inv \\
    #   https://airflow.apache.org/docs/apache-airflow-providers-cncf-kubernetes/stable/objects.inv
    # (and https://airflow.apache.org/docs/task-sdk/stable/objects.inv for task-sdk.inv)
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import zlib
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
SITE = "https://airflow.apache.org/docs"
#: inventory name -> (distribution, top package documented)
PROVIDERS = {
    "cncf-kubernetes": ("apache-airflow-providers-cncf-kubernetes", "airflow.providers.cncf.kubernetes"),
    "amazon": ("apache-airflow-providers-amazon", "airflow.providers.amazon"),
}


#: Airflow's Task SDK (``BaseOperator``, ``DAG``, ``Param``...): its docs put the public ``airflow.sdk`` API on
#: one page, ``api.html``, each object anchored by its dotted name (task-sdk/docs/api.rst in apache/airflow:
#: ``autoapiclass``/``autoapifunction``); the names it documents there, by role. The rest of ``airflow.sdk``
#: is listed with ``:no-index:``, so it has no anchor to link to.
TASK_SDK = ("task-sdk", "apache-airflow-task-sdk")
SDK_DOCUMENTED = {
    "class": [
        "DAG",
        "BaseAsyncOperator",
        "BaseBranchOperator",
        "BaseOperator",
        "BaseSensorOperator",
        "BaseNotifier",
        "BaseOperatorLink",
        "BaseXCom",
        "BranchMixIn",
        "PokeReturnValue",
        "SkipMixin",
        "ResumableJobMixin",
        "BaseHook",
        "AsyncCallback",
        "SyncCallback",
        "DeadlineAlert",
        "DeadlineReference",
        "Connection",
        "Variable",
        "TaskGroup",
        "TaskInstance",
        "XComArg",
        "Param",
        "ParamsDict",
        "TriggerRule",
        "RetryPolicy",
        "ExceptionRetryPolicy",
        "RetryRule",
        "RetryDecision",
        "RetryAction",
        "TaskInstanceState",
        "DagRunState",
        "WeightRule",
        "EdgeModifier",
        "Label",
        "Asset",
        "AssetAlias",
        "AssetAll",
        "AssetAny",
        "AssetWatcher",
        "Metadata",
        "ObjectStoragePath",
        "Context",
    ],
    "function": [
        "dag",
        "task",
        "task_group",
        "setup",
        "teardown",
        "asset",
        "literal",
        "get_current_context",
        "get_parsing_context",
        "chain",
        "chain_linear",
        "cross_downstream",
    ],
}


def task_sdk_url(version: str) -> str:
    """The Task SDK's docs of one version (``https://airflow.apache.org/docs/task-sdk/1.1.0/`` and so on)."""
    return f"{SITE}/task-sdk/{version}/"


def sdk_objects() -> Iterator[tuple[str, str, str]]:
    """``(dotted name, role, page)`` for what the Task SDK's API page documents and the installed
    ``airflow.sdk`` exports (its ``__all__``, read with ``ast``: nothing imported)."""
    spec = importlib.util.find_spec("airflow.sdk")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    (exported,) = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]
    ]
    for role, names in SDK_DOCUMENTED.items():
        for name in names:
            if name in exported:
                yield f"airflow.sdk.{name}", role, "api.html"


def base_url(distribution: str) -> str:
    """The provider's docs for the installed version (what the reference describes)."""
    return f"{SITE}/{distribution}/{importlib.metadata.version(distribution)}/"


def _public(name: str) -> bool:
    return not name.startswith("_")


def objects(package: str) -> Iterator[tuple[str, str, str]]:
    """``(dotted name, role, page)`` for every public object of ``package``'s modules."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, package
    root = Path(next(iter(spec.submodule_search_locations)))
    for source in sorted(root.rglob("*.py")):
        parts = source.relative_to(root).with_suffix("").parts
        if not all(_public(p) for p in parts if p != "__init__"):
            continue
        module = ".".join((package, *(p for p in parts if p != "__init__")))
        page = "_api/" + module.replace(".", "/") + "/index.html"
        yield module, "module", page
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(node.name):
                yield f"{module}.{node.name}", "function", page
            elif isinstance(node, ast.ClassDef) and _public(node.name):
                bases = {ast.unparse(b) for b in node.bases}
                role = "exception" if any(b.endswith(("Exception", "Error")) for b in bases) else "class"
                yield f"{module}.{node.name}", role, page
                for member in node.body:
                    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(member.name):
                        yield f"{module}.{node.name}.{member.name}", "method", page


def inventory(name: str, distribution: str, package: str | None) -> bytes:
    """Sphinx's inventory format, version 2: a plain header, then zlib-compressed lines. ``package``
    None: the Task SDK's API page (``sdk_objects``)."""
    version = importlib.metadata.version(distribution)
    header = f"# Sphinx inventory version 2\n# Project: {distribution}\n# Version: {version}\n"
    header += "# The remainder of this file is compressed using zlib.\n"
    lines = "".join(
        f"{dotted} py:{role} 1 {page}#{dotted if role != 'module' else 'module-' + dotted} -\n"
        for dotted, role, page in (objects(package) if package else sdk_objects())
    )
    return header.encode() + zlib.compress(lines.encode(), 9)


def main() -> None:
    for name, (distribution, package) in PROVIDERS.items():
        (HERE / f"{name}.inv").write_bytes(inventory(name, distribution, package))
    name, distribution = TASK_SDK
    (HERE / f"{name}.inv").write_bytes(inventory(name, distribution, None))


if __name__ == "__main__":
    main()
