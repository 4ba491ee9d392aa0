"""Regenerate ``provider/airflow_gpu/testing/kubernetes/patch_strategies.json`` from Kubernetes' Go
types: each struct field tagged ``patchStrategy``/``patchMergeKey``, as the ``x-kubernetes-patch-strategy``
and ``x-kubernetes-patch-merge-key`` extensions the API server's OpenAPI gives that property.

    python tools/k8s_patch_strategies.py KUBERNETES_API_CHECKOUT APIMACHINERY_CHECKOUT VERSION

Reads ``core/v1`` and ``batch/v1`` from ``kubernetes/api`` and ``meta/v1`` from
``kubernetes/apimachinery``. kubectl 1.28 and older build ``apply``'s three-way strategic merge
patch from these extensions of ``/openapi/v2`` (``PatchMetaFromOpenAPI``); without them a list of
containers or env vars is sent whole and the server keeps the items the manifest no longer names.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

FILES = {
    "api": {"core/v1/types.go": "io.k8s.api.core.v1", "batch/v1/types.go": "io.k8s.api.batch.v1"},
    "apimachinery": {"pkg/apis/meta/v1/types.go": "io.k8s.apimachinery.pkg.apis.meta.v1"},
}
STRUCT = re.compile(r"^type (\w+) struct \{")
TAGGED = re.compile(r"^\s*\w+\s+[^`]+`([^`]*)`")
TAG = re.compile(r'(\w+):"([^"]*)"')
OUT = Path(__file__).resolve().parent.parent / "provider/airflow_gpu/testing/kubernetes/patch_strategies.json"


def parse(text: str, package: str) -> dict[str, dict[str, dict[str, str]]]:
    """``{definition: {json name: extensions}}`` for the tagged fields of each top-level struct."""
    result: dict[str, dict[str, dict[str, str]]] = {}
    current = None
    for line in text.splitlines():
        struct = STRUCT.match(line)
        if struct:
            current = f"{package}.{struct.group(1)}"
        elif line.startswith("}"):
            current = None
        elif current and (field := TAGGED.match(line)):
            tags = dict(TAG.findall(field.group(1)))
            extensions = {}
            if tags.get("patchStrategy"):
                extensions["x-kubernetes-patch-strategy"] = tags["patchStrategy"]
            if tags.get("patchMergeKey"):
                extensions["x-kubernetes-patch-merge-key"] = tags["patchMergeKey"]
            if extensions:
                result.setdefault(current, {})[tags["json"].split(",")[0]] = extensions
    return result


def main(api: str, apimachinery: str, version: str) -> None:
    roots = {"api": Path(api), "apimachinery": Path(apimachinery)}
    definitions: dict[str, dict[str, dict[str, str]]] = {}
    for repo, files in FILES.items():
        for name, package in files.items():
            definitions.update(parse((roots[repo] / name).read_text(), package))
    document = {"source": f"kubernetes/api and kubernetes/apimachinery {version}", "definitions": definitions}
    OUT.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
