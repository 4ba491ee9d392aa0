"""Server-side field validation (``fieldValidation``, KEP-2885) and the served OpenAPI, through real
``kubectl`` and the official ``kubernetes`` client.

The expected messages are kube-apiserver's (``apiserver/pkg/endpoints/handlers``): a strict create
is a 400 from ``transformDecodeError`` (``Pod in version "v1" cannot be handled as a Pod: strict
decoding error: unknown field "spec.containers[0].imagee"``), a strict patch a 422 from
``NewInvalid`` with no kind and no name (``"" is invalid: patch: Invalid value: ...``, which
kubectl prints as ``The request is invalid: patch: ...``); ``Warn`` answers ``Warning: 299 -
"unknown field ..."`` headers and drops the fields, ``Ignore`` drops them silently.

kubectl hands the check to the server when the served OpenAPI lists ``fieldValidation`` for the
kind's PATCH: ``/openapi/v3`` for kubectl 1.29+ (``queryParamVerifierV3``; checked with 1.29, 1.31,
1.32, 1.33), ``/openapi/v2`` in protobuf form for 1.25 to 1.28 (``supportsQueryParam``; read from
cli-runtime, no such kubectl run here). kubectl before 1.25 (Debian's 1.20, which CI runs)
validates on its side against the definitions of that protobuf document, with kubectl's own
words: ``error validating data: ValidationError(Pod.spec.containers[0]): unknown field "imagee" in
io.k8s.api.core.v1.Container`` (``kube-openapi``'s ``validation``; seen with 1.20.2), and
``kubectl explain`` before 1.27 prints those definitions in its older layout (``RESOURCE:``,
``FIELD:    image <string>``). Each kubectl test expects its own kubectl's behaviour, so it runs,
and can fail, with whichever kubectl ``program("kubectl")`` finds.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.programs import program
from tests.testing.kubernetes.test_kubectl import kubectl

BAD_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: typo
spec:
  restartPolicy: Never
  containers:
  - name: main
    imagee: busybox
    command: ["sleep", "600"]
"""
CONFIG_MAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  labels: {{tier: {tier}}}
data:
  {data}
"""


def _kubectl_minor() -> int:
    out = subprocess.run([program("kubectl"), "version", "--client", "-o", "json"], capture_output=True, text=True)
    return int(re.sub(r"\D.*", "", json.loads(out.stdout)["clientVersion"]["minor"]))


#: kubectl validates on its side before this minor version (``--validate=strict``, 1.25, asks the server).
SERVER_SIDE_SINCE = 25
#: ``kubectl explain`` reads ``/openapi/v3`` with its newer layout from this minor version on.
EXPLAIN_V3_SINCE = 27


def _client_side_error(manifest: Path, path: str, field: str, definition: str) -> str:
    """kubectl's own refusal of an unknown field (``kube-openapi/pkg/util/proto/validation``)."""
    return (
        f'error: error validating "{manifest}": error validating data: ValidationError({path}): unknown field '
        f'"{field}" in {definition}; if you choose to ignore these errors, turn validation off with --validate=false'
    )


def test_kubectl_apply_of_an_unknown_field_fails_with_the_servers_message(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path, core: client.CoreV1Api
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(BAD_POD)
    result = kubectl(kubernetes_emulator, "apply", "-f", str(manifest), check=False)
    assert result.returncode != 0
    if _kubectl_minor() < SERVER_SIDE_SINCE:
        expected = _client_side_error(manifest, "Pod.spec.containers[0]", "imagee", "io.k8s.api.core.v1.Container")
    else:
        expected = (
            f'Error from server (BadRequest): error when creating "{manifest}": Pod in version "v1" cannot be '
            'handled as a Pod: strict decoding error: unknown field "spec.containers[0].imagee"'
        )
    assert result.stderr.strip() == expected
    assert "typo" not in [pod.metadata.name for pod in core.list_namespaced_pod("default").items]


def test_kubectl_apply_creates_then_patches_and_refuses_a_typo_in_the_patch(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path, core: client.CoreV1Api
) -> None:
    manifest = tmp_path / "settings.yaml"
    manifest.write_text(CONFIG_MAP.format(tier="a", data="mode: fast"))
    assert kubectl(kubernetes_emulator, "apply", "-f", str(manifest)).stdout.strip() == "configmap/settings created"
    manifest.write_text(CONFIG_MAP.format(tier="b", data="mode: slow"))
    assert kubectl(kubernetes_emulator, "apply", "-f", str(manifest)).stdout.strip() == "configmap/settings configured"
    stored = core.read_namespaced_config_map("settings", "default")
    assert (stored.data, stored.metadata.labels) == ({"mode": "slow"}, {"tier": "b"})

    manifest.write_text(CONFIG_MAP.format(tier="b", data="mode: slow") + "dataa:\n  x: z\n")
    result = kubectl(kubernetes_emulator, "apply", "-f", str(manifest), check=False)
    assert result.returncode != 0
    if _kubectl_minor() < SERVER_SIDE_SINCE:
        expected = _client_side_error(manifest, "ConfigMap", "dataa", "io.k8s.api.core.v1.ConfigMap")
        assert result.stderr.strip() == expected
    else:
        assert result.stderr.startswith("The request is invalid: patch: Invalid value: ")
        assert result.stderr.strip().endswith('strict decoding error: unknown field "dataa"')
    assert core.read_namespaced_config_map("settings", "default").data == {"mode": "slow"}


def test_kubectl_apply_of_a_new_image_patches_the_container_by_name(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path, core: client.CoreV1Api
) -> None:
    """kubectl's three-way patch of a list keyed by ``name`` carries ``$setElementOrder/containers``:
    a directive to the server, not a field (the API server lets a pod's container images change).
    kubectl 1.28 and older build it from the served ``x-kubernetes-patch-merge-key``."""
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(BAD_POD.replace("imagee: busybox", "image: busybox"))
    kubectl(kubernetes_emulator, "apply", "-f", str(manifest))
    manifest.write_text(BAD_POD.replace("imagee: busybox", "image: busybox:1.36"))
    assert kubectl(kubernetes_emulator, "apply", "-f", str(manifest)).stdout.strip() == "pod/typo configured"
    pod = core.read_namespaced_pod("typo", "default", _preload_content=False)
    spec = json.loads(pod.data)["spec"]
    assert [(c["name"], c["image"]) for c in spec["containers"]] == [("main", "busybox:1.36")]
    assert not [key for key in spec if key.startswith("$")]


def test_kubectl_explain_prints_the_served_field_docs(kubernetes_emulator: KubernetesEmulator) -> None:
    if _kubectl_minor() < EXPLAIN_V3_SINCE:
        _old_explain(kubernetes_emulator)
        return
    containers = kubectl(kubernetes_emulator, "explain", "pod.spec.containers").stdout
    assert "FIELD: containers <[]Container>" in containers
    assert "List of containers belonging to the pod." in " ".join(containers.split())
    assert re.search(r"^  image\t<string>$", containers, re.MULTILINE)
    image = kubectl(kubernetes_emulator, "explain", "pod.spec.containers.image").stdout
    assert "FIELD: image <string>" in image
    assert "Container image name." in image
    backoff = kubectl(kubernetes_emulator, "explain", "job.spec.backoffLimit").stdout
    assert "GROUP:      batch" in backoff and "FIELD: backoffLimit <integer>" in backoff


def _old_explain(kubernetes_emulator: KubernetesEmulator) -> None:
    """kubectl's explain before OpenAPI v3 (``pkg/explain``, read from ``/openapi/v2``; 1.20's layout)."""
    containers = kubectl(kubernetes_emulator, "explain", "pod.spec.containers").stdout
    assert containers.startswith("KIND:     Pod\nVERSION:  v1\n\nRESOURCE: containers <[]Object>\n")
    assert "List of containers belonging to the pod." in " ".join(containers.split())
    assert re.search(r"^   image\t<string>$", containers, re.MULTILINE)
    assert re.search(r"^   name\t<string> -required-$", containers, re.MULTILINE)
    image = kubectl(kubernetes_emulator, "explain", "pod.spec.containers.image").stdout
    assert "FIELD:    image <string>" in image
    assert "Container image name." in image
    backoff = kubectl(kubernetes_emulator, "explain", "job.spec.backoffLimit").stdout
    assert "VERSION:  batch/v1" in backoff and "FIELD:    backoffLimit <integer>" in backoff


def _config_map(name: str, **extra: object) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}, **extra}


def test_field_validation_strict_warn_and_ignore_through_the_official_client(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_config_map("default", _config_map("strict", datta={"x": "y"}), field_validation="Strict")
    assert refused.value.status == 400
    status = json.loads(refused.value.body)
    assert (status["reason"], status["message"]) == (
        "BadRequest",
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "datta"',
    )

    _, code, headers = core.create_namespaced_config_map_with_http_info(
        "default", _config_map("warned", datta={"x": "y"}, metadata={"name": "warned", "lables": {}}),
        field_validation="Warn",
    )  # fmt: skip
    assert code == 201
    assert headers.getlist("Warning") == [
        '299 - "unknown field \\"metadata.lables\\""',
        '299 - "unknown field \\"datta\\""',
    ]
    raw = core.read_namespaced_config_map("warned", "default", _preload_content=False)
    assert "datta" not in json.loads(raw.data) and "lables" not in json.loads(raw.data)["metadata"]

    _, code, headers = core.create_namespaced_config_map_with_http_info(
        "default", _config_map("ignored", datta={"x": "y"}), field_validation="Ignore"
    )
    assert code == 201 and not headers.getlist("Warning")
    assert "datta" not in json.loads(core.read_namespaced_config_map("ignored", "default", _preload_content=False).data)

    with pytest.raises(ApiException) as patch_refused:
        core.patch_namespaced_config_map(
            "ignored", "default", {"dataa": {"b": "2"}}, field_validation="Strict",
            _content_type="application/merge-patch+json",
        )  # fmt: skip
    assert patch_refused.value.status == 422
    patch_status = json.loads(patch_refused.value.body)
    assert patch_status["reason"] == "Invalid"
    assert patch_status["message"].startswith(' "" is invalid: patch: Invalid value: "{')
    assert patch_status["message"].endswith(': strict decoding error: unknown field "dataa"')
    assert patch_status["details"]["causes"][0]["field"] == "patch"


def test_a_duplicate_field_is_refused_under_strict(kubernetes_emulator: KubernetesEmulator) -> None:
    body = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"twice","name":"twice"},"data":{"a":"1"}}'
    request = urllib.request.Request(
        f"{kubernetes_emulator.url}/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
        data=body, headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert json.loads(refused.value.read())["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
        'duplicate field "metadata.name"'
    )


def test_openapi_v3_offers_field_validation_on_each_kinds_patch(kubernetes_emulator: KubernetesEmulator) -> None:
    """What ``queryParamVerifierV3.HasSupport`` looks for: a PATCH of the kind listing ``fieldValidation``."""
    with urllib.request.urlopen(f"{kubernetes_emulator.url}/openapi/v3", timeout=10) as response:
        index = json.loads(response.read())
    url = index["paths"]["apis/batch/v1"]["serverRelativeURL"]
    with urllib.request.urlopen(kubernetes_emulator.url + url, timeout=10) as response:
        document = json.loads(response.read())
    patches = [
        item["patch"] for item in document["paths"].values()
        if "patch" in item and item["patch"]["x-kubernetes-group-version-kind"]["kind"] == "Job"
    ]  # fmt: skip
    assert patches and all("fieldValidation" in [p["name"] for p in op["parameters"]] for op in patches)
    job = document["components"]["schemas"]["io.k8s.api.batch.v1.Job"]
    assert job["x-kubernetes-group-version-kind"] == [{"group": "batch", "kind": "Job", "version": "v1"}]
    assert "template" in document["components"]["schemas"]["io.k8s.api.batch.v1.JobSpec"]["required"]
