"""The AWS Batch translation, checked against botocore's own model of the Batch API.

``RegisterJobDefinition`` input is validated with botocore's parameter validator, the same check
boto3 runs before sending a request, so a misspelt key or a wrong type fails here.
"""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest
from botocore.validate import ParamValidator

from airflow_gpu import Accelerator, AcceleratorSpecError
from airflow_gpu.accelerators import batch


def _validate_job_definition(container_properties: dict[str, Any]) -> None:
    model = botocore.session.get_session().get_service_model("batch")
    params = {
        "jobDefinitionName": "gpu-job",
        "type": "container",
        "containerProperties": {"image": "pytorch/pytorch", "command": ["true"], **container_properties},
    }
    report = ParamValidator().validate(params, model.operation_model("RegisterJobDefinition").input_shape)
    assert not report.has_errors(), report.generate_report()


@pytest.mark.parametrize("text", ["H100:8", "A10G", "L4:4", "V100-32GB:8", "trn2:16", "inf2:6", "B200:8"])
def test_translation_is_a_valid_job_definition(text: str) -> None:
    placement = batch.to_batch(text)
    _validate_job_definition(placement.as_dict()["containerProperties"])
    assert placement.instance_types


def test_nvidia_gpus_are_a_gpu_requirement() -> None:
    assert batch.resource_requirements("A10G:4", vcpus=16, memory="64Gi") == [
        {"type": "GPU", "value": "4"},
        {"type": "VCPU", "value": "16"},
        {"type": "MEMORY", "value": "65536"},
    ]
    assert batch.resource_requirements("L4", vcpus=0.5, memory=2048)[1:] == [
        {"type": "VCPU", "value": "0.5"},
        {"type": "MEMORY", "value": "2048"},
    ]


def test_defaults_are_the_gpus_share_of_the_smallest_host() -> None:
    # g5.12xlarge: 4 x A10G, 48 vCPUs, 192 GiB; half of it for 2 GPUs, 90% of the memory share.
    assert batch.resource_requirements("A10G:2") == [
        {"type": "GPU", "value": "2"},
        {"type": "VCPU", "value": "24"},
        {"type": "MEMORY", "value": str(int(96 * 1024 * 0.9))},
    ]


def test_neuron_devices_are_passed_through_not_requested() -> None:
    spec = Accelerator.parse("inf2:6")
    requirements = batch.resource_requirements(spec)
    assert [r["type"] for r in requirements] == ["VCPU", "MEMORY"]
    devices = batch.linux_parameters(spec)["devices"]
    assert [d["hostPath"] for d in devices] == [f"/dev/neuron{i}" for i in range(6)]
    assert all(d["containerPath"] == d["hostPath"] and d["permissions"] == ["READ", "WRITE"] for d in devices)


def test_shared_memory_size() -> None:
    assert batch.linux_parameters("H100:8", memory="1024Gi") == {"sharedMemorySize": 65536}
    assert batch.linux_parameters("L4", memory=8192) == {"sharedMemorySize": 4096}  # half the memory
    assert batch.linux_parameters("L4", shared_memory="2Gi") == {"sharedMemorySize": 2048}
    assert batch.linux_parameters("L4", shared_memory=None) == {}


def test_instance_types_hosting_the_spec() -> None:
    assert [t.name for t in batch.instance_types("H100:8")] == ["p5.48xlarge"]
    assert [t.name for t in batch.instance_types("H100")] == ["p5.4xlarge", "p5.48xlarge"]
    assert [t.name for t in batch.instance_types("A100-80GB:8")] == ["p4de.24xlarge"]
    assert [t.name for t in batch.instance_types("A100:8")] == ["p4d.24xlarge", "p4de.24xlarge"]
    assert [t.name for t in batch.instance_types("V100-32GB")] == ["p3dn.24xlarge"]
    assert [t.name for t in batch.instance_types("L4:4")] == ["g6.12xlarge", "g6.24xlarge", "g6.48xlarge"]
    assert batch.instance_types("H100-NVL") == ()


@pytest.mark.parametrize(
    ("text", "kwargs", "field", "fragment"),
    [
        ("MI300X:8", {}, "type", "no AWS instance type carries it"),
        ("TPU-v5p:4", {}, "type", "no AWS instance type carries it"),
        ("H100-MIG-3g.40gb", {}, "mig", "MIG slices need Kubernetes"),
        ("A100:16", {}, "count", "largest: p4d.24xlarge with 8"),
        ("H100-NVL", {}, "count", "no AWS instance type carries H100-94GB-NVL"),
        ("A10G", {"vcpus": 256}, "vcpus", "at most 192"),
        ("A10G", {"memory": "1Ti"}, "memory", "at most 786432 MiB"),
        ("A10G", {"memory": "lots"}, "memory", "not a memory amount"),
        ("A10G", {"vcpus": "-1"}, "vcpus", "must be a positive number"),
    ],
)
def test_errors(text: str, kwargs: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(AcceleratorSpecError) as caught:
        batch.to_batch(text, **kwargs)
    assert caught.value.field == field
    assert fragment in str(caught.value)


def test_instance_offers_expand_families_and_exact_types() -> None:
    from airflow_gpu.accelerators.batch import describe_offers, instance_offers

    offers = instance_offers(["g5", "p5.48xlarge", "optimal", "c7i"])
    assert {o.accelerator for o in offers} == {"A10G", "H100"}
    assert {o.instance_type.name for o in offers if o.accelerator == "H100"} == {"p5.48xlarge"}
    assert len([o for o in offers if o.accelerator == "A10G"]) == 8  # the whole g5 ladder
    assert describe_offers(offers) == "g5 (A10G), p5 (H100)"
    assert describe_offers(instance_offers(["optimal"])) == "no accelerators"
