"""The catalog is data; these tests keep it consistent and true to the facts it cites."""

from __future__ import annotations

import re

import pytest

from airflow_gpu.accelerators import catalog

# From NVIDIA's MIG user guide, as the foundation issue lists them (plus A100-40GB's 1g.10gb x4,
# which the guide lists for R470+ drivers).
EXPECTED_MIG = {
    ("A100", 40): {"1g.5gb": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
    ("A100", 80): {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    ("H100", 80): {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    ("H100", 94): {"1g.12gb": 7, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1},
    ("H200", 141): {"1g.18gb": 7, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},
    ("B200", 180): {"1g.23gb": 7, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1, "7g.180gb": 1},
}

REQUIRED_TYPES = {
    "V100",
    "T4",
    "A10G",
    "L4",
    "L40S",
    "A100",
    "H100",
    "H200",
    "B200",
    "MI250X",
    "MI300X",
    "Trainium",
    "Trainium2",
    "Inferentia2",
    "TPU-v5e",
    "TPU-v5p",
}


def test_catalog_has_every_type_the_product_promises() -> None:
    assert set(catalog.names()) == REQUIRED_TYPES


@pytest.mark.parametrize(("key", "profiles"), EXPECTED_MIG.items(), ids=lambda v: str(v))
def test_mig_profiles_match_nvidia_guide(key: tuple[str, int], profiles: dict[str, int]) -> None:
    name, memory = key
    for variant in catalog.get(name).variants:
        if variant.memory_gb == memory:
            assert {p.name: p.max_instances for p in variant.mig_profiles} == profiles


def test_only_ampere_and_newer_datacenter_gpus_have_mig() -> None:
    assert {e.name for e in catalog.CATALOG if e.supports_mig} == {"A100", "H100", "H200", "B200"}


@pytest.mark.parametrize("entry", catalog.CATALOG, ids=lambda e: e.name)
def test_entry_is_consistent(entry: catalog.AcceleratorType) -> None:
    assert entry.variants, "every type needs at least one variant"
    for variant in entry.variants:
        for profile in variant.mig_profiles:
            # the profile's memory never exceeds the GPU's, and the name parses
            assert profile.memory_gb <= variant.memory_gb
            assert 1 <= profile.compute_slices <= 7
            assert profile.max_instances * profile.compute_slices <= 7
    for itype in entry.instance_types:
        assert 1 <= itype.accelerators <= entry.max_per_node
        assert itype.memory_gb in entry.memory_variants
        assert re.fullmatch(r"[a-z0-9-]+\.[a-z0-9]+", itype.name)
    if entry.vendor == "nvidia":
        assert entry.compute_capability and entry.min_cuda
        assert all(v.gfd_product for v in entry.variants)
        assert entry.resource_name == "nvidia.com/gpu"
    else:
        assert entry.compute_capability is None and entry.min_cuda is None
    assert set(entry.counts) <= set(range(1, entry.max_per_node + 1))
    assert set(entry.tpu_topologies) <= set(entry.counts)


def test_minimum_cuda_follows_the_design_table() -> None:
    expected = {
        "V100": "9.0",
        "T4": "10.0",
        "A100": "11.0",
        "A10G": "11.1",
        "L4": "11.8",
        "L40S": "11.8",
        "H100": "11.8",
        "H200": "11.8",
        "B200": "12.8",
    }
    assert {n: catalog.get(n).min_cuda for n in expected} == expected
    assert catalog.get("V100").max_cuda_major == 12


def test_resource_names_per_vendor() -> None:
    assert catalog.get("MI300X").resource_name == "amd.com/gpu"
    assert catalog.get("trn2").resource_name == "aws.amazon.com/neuron"
    assert catalog.get("TPU-v5p").resource_name == "google.com/tpu"


def test_aliases_are_unique_and_lowercase() -> None:
    keys = catalog.aliases()
    assert len(keys) == len(set(keys))
    assert all(key == key.lower() for key in keys)


def test_lookup_ignores_case_spaces_and_vendor_prefix() -> None:
    for spelling in ("h100", "H100", "nvidia h100", "NVIDIA-H100", "nvidia_h100"):
        assert catalog.lookup(spelling) is catalog.get("H100")
    assert catalog.lookup("nonsense") is None
    with pytest.raises(KeyError):
        catalog.get("nonsense")
