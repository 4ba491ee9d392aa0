"""The reference's arguments tables (docs/_ext/operator_arguments.py) and the shipped intersphinx
inventories (docs/_inventories/): what a reader is told is new, overridden or inherited must be what
the operators' signatures and the official operators' signatures say."""

from __future__ import annotations

import inspect
import sys
import zlib

import pytest
from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.operators.batch import BatchOperator
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import BaseOperator

from airflow_gpu.operators.accelerate import AccelerateTrainOperator
from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from tests.docs.site import DOCS

sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS / "_inventories"))
import operator_arguments
import provider_inventories

KPO = "airflow.providers.cncf.kubernetes.operators.pod.KubernetesPodOperator"
BATCH = "airflow.providers.amazon.aws.operators.batch.BatchOperator"
AWS_BASE = "airflow.providers.amazon.aws.operators.base_aws.AwsBaseOperator"
BASE = "airflow.sdk.BaseOperator"


def _named(cls: type) -> set[str]:
    return {
        n
        for n, p in list(inspect.signature(cls.__init__).parameters.items())[1:]
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }


def by_name(cls: type) -> dict[str, operator_arguments.Argument]:
    return {a.name: a for a in operator_arguments.arguments(cls)}


def test_kubernetes_operator_arguments_new_overridden_and_inherited() -> None:
    args = by_name(GPUKubernetesOperator)
    assert (args["accelerator"].origin, args["accelerator"].base) == ("new", None)
    assert args["accelerator"].default == "required"
    # KPO's image is required there; this operator declares it again, defaulting to "auto".
    assert (args["image"].origin, args["image"].base, args["image"].default) == ("overridden", KPO, "'auto'")
    assert (args["cmds"].origin, args["cmds"].base) == ("inherited", KPO)
    assert (args["task_id"].origin, args["task_id"].base) == ("inherited", BASE)
    # Every argument KPO and BaseOperator take is listed: the operator passes them on in **kwargs.
    assert _named(KubernetesPodOperator) | _named(BaseOperator) <= set(args)


def test_batch_operator_arguments_name_the_base_that_declares_each() -> None:
    args = by_name(GPUBatchOperator)
    assert args["job_queue"].origin == "overridden" and args["job_queue"].base == BATCH
    assert args["command"].origin == "new"  # BatchOperator has container_overrides, no command
    assert (args["array_properties"].origin, args["array_properties"].base) == ("inherited", BATCH)
    assert (args["aws_conn_id"].origin, args["aws_conn_id"].base) == ("inherited", AWS_BASE)
    assert _named(BatchOperator) | _named(AwsBaseOperator) | _named(BaseOperator) <= set(args)


def test_arguments_are_listed_new_then_overridden_then_inherited() -> None:
    origins = [a.origin for a in operator_arguments.arguments(GPUBatchOperator)]
    assert origins == sorted(origins, key=["new", "overridden", "inherited"].index)
    assert {a.base for a in operator_arguments.arguments(AccelerateTrainOperator) if a.origin != "new"} == {BASE}


@pytest.mark.parametrize("name", sorted(provider_inventories.PROVIDERS))
def test_shipped_inventory_is_of_the_installed_provider(name: str) -> None:
    """The reference links to the installed version's docs; an inventory of another version is stale."""
    distribution, package = provider_inventories.PROVIDERS[name]
    data = (DOCS / "_inventories" / f"{name}.inv").read_bytes()
    header, _, body = data.partition(b"# The remainder of this file is compressed using zlib.\n")
    assert f"# Version: {provider_inventories.importlib.metadata.version(distribution)}\n".encode() in header, (
        f"docs/_inventories/{name}.inv is of another {distribution}: run docs/_inventories/provider_inventories.py"
    )
    fresh = provider_inventories.inventory(name, distribution, package).split(b"zlib.\n", 1)[1]
    assert zlib.decompress(body) == zlib.decompress(fresh), f"run docs/_inventories/provider_inventories.py ({name})"


def test_shipped_task_sdk_inventory_is_of_the_installed_sdk() -> None:
    """``BaseOperator``'s arguments link to the installed Task SDK's API page; an inventory of another
    version, or one that lists what that ``airflow.sdk`` does not export, is stale."""
    name, distribution = provider_inventories.TASK_SDK
    data = (DOCS / "_inventories" / f"{name}.inv").read_bytes()
    header, _, body = data.partition(b"# The remainder of this file is compressed using zlib.\n")
    assert f"# Version: {provider_inventories.importlib.metadata.version(distribution)}\n".encode() in header
    fresh = provider_inventories.inventory(name, distribution, None).split(b"zlib.\n", 1)[1]
    assert zlib.decompress(body) == zlib.decompress(fresh), "run docs/_inventories/provider_inventories.py (task-sdk)"
    import airflow.sdk

    lines = zlib.decompress(body).decode().splitlines()
    listed = {line.split()[0] for line in lines}
    assert {BASE, "airflow.sdk.DAG", "airflow.sdk.Param", "airflow.sdk.task"} <= listed
    assert all(hasattr(airflow.sdk, dotted.removeprefix("airflow.sdk.")) for dotted in listed)
    assert all(line.split()[3] == f"api.html#{line.split()[0]}" for line in lines)  # one page, anchored by name


@pytest.mark.parametrize("cls", [GPUKubernetesOperator, GPUBatchOperator, AccelerateTrainOperator])
def test_every_new_or_overridden_argument_says_what_it_means(cls: type) -> None:
    """The table's Meaning column is the ``:param:`` field of the provider's docstring: an argument added
    without one would show a blank meaning. An inherited one points to the class that documents it."""
    args = operator_arguments.arguments(cls)
    blank = [a.name for a in args if a.origin != "inherited" and not a.meaning]
    assert not blank, f"{cls.__name__}: no :param: for {blank}"
    table = "\n".join(operator_arguments.rst_table(cls))
    accelerator = next(a for a in args if a.name == "accelerator")
    assert accelerator.meaning in table and "\n" not in accelerator.meaning
    assert "see KubernetesPodOperator" in table or "see BatchOperator" in table or "see BaseOperator" in table


def test_the_hooks_tables_list_what_they_take_from_the_official_hooks() -> None:
    """The hooks add no argument: their tables list the official hooks' (connection, context, config), each
    marked inherited from the class that declares it."""
    from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    from airflow_gpu.hooks.batch import GPUBatchHook
    from airflow_gpu.hooks.kubernetes import GPUKubernetesHook

    kubernetes, batch = by_name(GPUKubernetesHook), by_name(GPUBatchHook)
    assert _named(KubernetesHook) <= set(kubernetes) and _named(BatchClientHook) <= set(batch)
    assert {a.origin for a in (*kubernetes.values(), *batch.values())} == {"inherited"}
    assert batch["aws_conn_id"].base == "airflow.providers.amazon.aws.hooks.base_aws.AwsGenericHook"
