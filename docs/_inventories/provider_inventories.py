"""Write the intersphinx inventories of the official providers' API docs, from the installed packages.

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


def inventory(name: str, distribution: str, package: str) -> bytes:
    """Sphinx's inventory format, version 2: a plain header, then zlib-compressed lines."""
    version = importlib.metadata.version(distribution)
    header = f"# Sphinx inventory version 2\n# Project: {distribution}\n# Version: {version}\n"
    header += "# The remainder of this file is compressed using zlib.\n"
    lines = "".join(
        f"{dotted} py:{role} 1 {page}#{dotted if role != 'module' else 'module-' + dotted} -\n"
        for dotted, role, page in objects(package)
    )
    return header.encode() + zlib.compress(lines.encode(), 9)


def main() -> None:
    for name, (distribution, package) in PROVIDERS.items():
        (HERE / f"{name}.inv").write_bytes(inventory(name, distribution, package))


if __name__ == "__main__":
    main()
