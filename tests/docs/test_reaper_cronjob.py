"""The reaper's CronJob (docs/permissions/reaper-cronjob.yaml, included by docs/production.rst): a CronJob
of the Kubernetes API's schema, whose Job and pod the Kubernetes emulator admits in the namespace of
the ServiceAccount that docs/permissions/kubernetes-reaper.yaml binds, running a command that the
real ``airflow-gpu`` parser accepts, with the Airflow token from a Secret in the variable the CLI reads.
"""

from __future__ import annotations

import copy
import json
import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, utils
from kubernetes.client.rest import ApiException

from airflow_gpu import cli
from airflow_gpu.reap import airflow_api
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.docs.site import DOCS

CRONJOB_FILE = DOCS / "permissions" / "reaper-cronjob.yaml"
REAPER_RBAC = DOCS / "permissions" / "kubernetes-reaper.yaml"
LIST_OR_MAP = re.compile(r"^list\[(.+)\]$|^dict\(str, (.+)\)$")


def cronjob() -> dict[str, Any]:
    (document,) = yaml.safe_load_all(CRONJOB_FILE.read_text())
    return document  # type: ignore[no-any-return]


def pod_spec(document: dict[str, Any]) -> dict[str, Any]:
    return document["spec"]["jobTemplate"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def container(document: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod_spec(document)["containers"]
    return only  # type: ignore[no-any-return]


def env(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container(document)["env"]}


def unknown_fields(value: Any, model: str, path: str = "") -> list[str]:
    """The fields of ``value`` that the ``kubernetes`` client's model ``model`` (its release's API
    schema: ``openapi_types`` by ``attribute_map`` name) does not declare, as dotted paths."""
    if not isinstance(value, dict):
        return []
    declared = {json_name: getattr(client, model).openapi_types[attribute]
                for attribute, json_name in getattr(client, model).attribute_map.items()}  # fmt: skip
    found = []
    for key, item in value.items():
        if key not in declared:
            found.append(path + key)
        else:
            found += _unknown_in(item, declared[key], f"{path}{key}.")
    return found


def _unknown_in(value: Any, python_type: str, path: str) -> list[str]:
    match = LIST_OR_MAP.match(python_type)
    if match and isinstance(value, list):
        return [f for i, item in enumerate(value) for f in _unknown_in(item, match[1] or "", f"{path[:-1]}[{i}].")]
    if match and isinstance(value, dict):
        return [f for key, item in value.items() for f in _unknown_in(item, match[2] or "", f"{path}{key}.")]
    return unknown_fields(value, python_type, path) if hasattr(client, python_type) else []


def reaper_binding() -> dict[str, Any]:
    (binding,) = (d for d in yaml.safe_load_all(REAPER_RBAC.read_text()) if d["kind"] == "ClusterRoleBinding")
    return binding  # type: ignore[no-any-return]


def test_it_reaps_with_delete_every_15_minutes_with_flags_the_cli_parser_accepts() -> None:
    document = cronjob()
    assert (document["apiVersion"], document["kind"]) == ("batch/v1", "CronJob")
    assert document["spec"]["schedule"] == "*/15 * * * *"
    program, *arguments = container(document)["command"]
    # The console script the package installs under that name runs the parser below.
    (script,) = (e for e in entry_points(group="console_scripts") if e.name == program)
    assert script.value == "airflow_gpu.cli:main"
    args = cli.build_parser().parse_args(arguments)  # argparse exits (SystemExit 2) on a flag it does not know
    assert (args.command, args.delete) == ("reap", True)
    assert args.backend == ["kubernetes"]  # the pod has a ServiceAccount, not AWS credentials


def test_the_token_comes_from_a_secret_into_the_variable_the_cli_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    document = cronjob()
    variables = env(document)
    token = variables["AIRFLOW_GPU_AIRFLOW_TOKEN"]
    assert "value" not in token and set(token["valueFrom"]["secretKeyRef"]) == {"name", "key"}
    # Run the CronJob's command with its environment as the kubelet would set it (the Secret's value
    # standing in), up to the first call to Airflow, and see what the CLI made of it.
    monkeypatch.delenv("AIRFLOW_GPU_AIRFLOW_URL", raising=False)
    monkeypatch.delenv("AIRFLOW_GPU_AIRFLOW_USER", raising=False)
    monkeypatch.setenv("AIRFLOW_GPU_AIRFLOW_URL", variables["AIRFLOW_GPU_AIRFLOW_URL"]["value"])
    monkeypatch.setenv("AIRFLOW_GPU_AIRFLOW_TOKEN", "the-secret-token")
    seen: list[tuple[str, str | None]] = []
    real_init = airflow_api.AirflowApi.__init__

    def init(api: airflow_api.AirflowApi, url: str, **kwargs: Any) -> None:
        seen.append((url, kwargs.get("token")))
        real_init(api, url, **kwargs)

    def check(api: airflow_api.AirflowApi) -> str:
        raise airflow_api.AirflowUnreachable("stopped here by the test")

    monkeypatch.setattr(airflow_api.AirflowApi, "__init__", init)
    monkeypatch.setattr(airflow_api.AirflowApi, "check", check)
    with pytest.raises(airflow_api.AirflowUnreachable, match="nothing was deleted"):
        cli.run(container(document)["command"][1:])
    assert seen == [("http://airflow-api-server.airflow.svc.cluster.local:8080", "the-secret-token")]


def test_its_service_account_is_the_one_the_reaper_rbac_binds() -> None:
    document = cronjob()
    subjects = reaper_binding()["subjects"]
    account = {"kind": "ServiceAccount", "name": pod_spec(document)["serviceAccountName"]}
    assert {**account, "namespace": document["metadata"]["namespace"]} in subjects


def test_every_field_is_in_the_kubernetes_api_schema() -> None:
    """As kube-apiserver's strict decoding (``fieldValidation=Strict``) would refuse them, against the
    schema of the ``kubernetes`` client's release; a misspelt field (``serviceAcountName``) is found."""
    assert unknown_fields(cronjob(), "V1CronJob") == []
    misspelt = cronjob()
    pod_spec(misspelt)["serviceAcountName"] = pod_spec(misspelt).pop("serviceAccountName")
    container(misspelt)["env"][1]["valueFrom"]["secretKeyRef"]["keys"] = "token"
    assert unknown_fields(misspelt, "V1CronJob") == [
        "spec.jobTemplate.spec.template.spec.containers[0].env[1].valueFrom.secretKeyRef.keys",
        "spec.jobTemplate.spec.template.spec.serviceAcountName",
    ]


def test_the_emulator_admits_its_job_and_pod_as_the_reaper_account(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    """What the CronJob controller creates each round, created as it would be: the Job from the
    template (strict decoding, the Job registry's validation; suspended, so nothing runs here) and
    its pod (the ServiceAccount admission: the account must exist in the CronJob's namespace)."""
    api = config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path))
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    document = cronjob()
    namespace = document["metadata"]["namespace"]
    secret = env(document)["AIRFLOW_GPU_AIRFLOW_TOKEN"]["valueFrom"]["secretKeyRef"]
    core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_service_account(namespace, {"metadata": {"name": pod_spec(document)["serviceAccountName"]}})
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": secret["name"]}, "stringData": {secret["key"]: "the-token"}}
    )
    utils.create_from_yaml(api, str(REAPER_RBAC))

    job = copy.deepcopy(document["spec"]["jobTemplate"])
    job["metadata"] = {"name": "airflow-gpu-reaper-1", "namespace": namespace}
    job["spec"]["suspend"] = True
    created = batch.create_namespaced_job(namespace, job, field_validation="Strict")
    assert created.spec.template.spec.service_account_name == "airflow-gpu-reaper"

    pod = copy.deepcopy(document["spec"]["jobTemplate"]["spec"]["template"])
    pod["metadata"] = {**pod["metadata"], "name": "airflow-gpu-reaper-1-abcde"}
    assert core.create_namespaced_pod(namespace, pod, field_validation="Strict").metadata.uid
    core.delete_namespaced_pod(pod["metadata"]["name"], namespace, grace_period_seconds=0)
    # Where the account does not exist, the same pod is refused: the admission is real.
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("default", pod, field_validation="Strict")
    assert refused.value.status == 403
    assert json.loads(refused.value.body)["message"].endswith('serviceaccount "airflow-gpu-reaper" not found')
