"""Regenerate ``provider/airflow_gpu/testing/kubernetes/protobuf_fields.json`` from Kubernetes'
``generated.proto`` files: each message reachable from the kinds the emulator decodes, as
``{message: [[number, name, type, label], ...]}``.

    python tools/k8s_protobuf_fields.py KUBERNETES_API_CHECKOUT APIMACHINERY_CHECKOUT VERSION

Reads ``core/v1`` and ``batch/v1`` from ``kubernetes/api`` and ``meta/v1``, ``resource``,
``intstr`` and ``runtime`` from ``kubernetes/apimachinery`` (same tag, e.g. v0.36.3).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

FILES = {
    "api": ["core/v1/generated.proto", "batch/v1/generated.proto"],
    "apimachinery": [
        "pkg/apis/meta/v1/generated.proto",
        "pkg/api/resource/generated.proto",
        "pkg/util/intstr/generated.proto",
        "pkg/runtime/generated.proto",
    ],
}
ROOTS = [
    "k8s.io.api.core.v1." + kind
    for kind in ("Namespace", "ResourceQuota", "LimitRange", "ConfigMap", "Secret", "ServiceAccount", "Service", "Pod")
] + ["k8s.io.api.batch.v1.Job", "k8s.io.apimachinery.pkg.runtime.Unknown"]
SCALARS = {"string", "bytes", "bool", "int32", "int64", "uint32", "uint64", "double", "float", "fixed64", "sint64"}
FIELD = re.compile(r"^\s*(optional|repeated)?\s*(map<\s*string\s*,\s*([\w.]+)\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;")


def parse(text: str) -> tuple[str, dict[str, list[list[object]]]]:
    package = re.search(r"^package ([\w.]+);", text, re.M).group(1)  # type: ignore[union-attr]
    messages: dict[str, list[list[object]]] = {}
    current = None
    for line in text.splitlines():
        if line.lstrip().startswith("//"):
            continue
        start = re.match(r"^message (\w+) \{", line)
        if start:
            current = f"{package}.{start.group(1)}"
            messages[current] = []
            continue
        if line.startswith("}"):
            current = None
            continue
        field = FIELD.match(line)
        if field and current:
            label, kind, map_value, name, number = field.groups()
            if map_value:
                kind, label = map_value, "map"
            messages[current].append([int(number), name, kind, label or "optional"])
    return package, messages


def main(api: str, apimachinery: str, version: str) -> None:
    messages: dict[str, list[list[object]]] = {}
    for root, paths in (("api", FILES["api"]), ("apimachinery", FILES["apimachinery"])):
        for path in paths:
            package, found = parse(Path(api if root == "api" else apimachinery, path).read_text())
            for fields in found.values():  # qualify relative type names within their package
                for field in fields:
                    kind = str(field[2]).lstrip(".")
                    field[2] = kind
                    if kind not in SCALARS and not kind.startswith("k8s.io."):
                        field[2] = f"{package}.{kind}"
            messages.update(found)
    keep: dict[str, list[list[object]]] = {}
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = messages[name]
        todo += [str(f[2]) for f in messages[name] if str(f[2]) not in SCALARS]
    out = Path(__file__).resolve().parent.parent / "provider/airflow_gpu/testing/kubernetes/protobuf_fields.json"
    body = {"source": f"kubernetes/api and kubernetes/apimachinery {version}, generated.proto", "messages": keep}
    out.write_text(json.dumps(body, indent=0, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"{len(keep)} messages -> {out}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
