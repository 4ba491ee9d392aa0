"""Parsing, canonical names and every validation error of ``Accelerator``."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from airflow_gpu import Accelerator, AcceleratorSpecError
from airflow_gpu.accelerators import catalog
from tests.properties import examples

SHORTHANDS = {
    "H100": ("H100", 1, None, None, None),
    "H100:8": ("H100", 8, None, None, None),
    "A100-40GB:4": ("A100", 4, 40, None, None),
    "a10g": ("A10G", 1, 24, None, None),
    "L40S:2": ("L40S", 2, 48, None, None),
    "Trainium2:16": ("Trainium2", 16, 96, None, None),
    "trn2:16": ("Trainium2", 16, 96, None, None),
    "Inferentia2": ("Inferentia2", 1, 32, None, None),
    "inf2:12": ("Inferentia2", 12, 32, None, None),
    "MI300X:8": ("MI300X", 8, 192, None, None),
    "TPU-v5p:4": ("TPU-v5p", 4, 95, None, None),
    "tpu v5e:8": ("TPU-v5e", 8, 16, None, None),
    "nvidia tesla t4": ("T4", 1, 16, None, None),
    "Tesla-V100-32GB:8": ("V100", 8, 32, None, None),
    "H100-NVL": ("H100", 1, 94, "NVL", None),
    "h100 sxm5:8": ("H100", 8, 80, "SXM", None),
    "A100-80GB-PCIe": ("A100", 1, 80, "PCIe", None),
    "A100-80g:2": ("A100", 2, 80, None, None),
    "H100-MIG-3g.40gb:2": ("H100", 2, 80, None, "3g.40gb"),
    "A100-mig-1g.5gb:7": ("A100", 7, 40, None, "1g.5gb"),
    "H200_MIG_1g.18gb": ("H200", 1, 141, None, "1g.18gb"),
    "trn1:16": ("Trainium", 16, 32, None, None),
    " b200 : 8 ": ("B200", 8, 180, None, None),
}


@pytest.mark.parametrize(("text", "expected"), SHORTHANDS.items())
def test_parse_shorthand(text: str, expected: tuple[object, ...]) -> None:
    spec = Accelerator.parse(text)
    assert (spec.type, spec.count, spec.memory_gb, spec.form_factor, spec.mig) == expected


@pytest.mark.parametrize("text", SHORTHANDS)
def test_str_is_canonical_and_round_trips(text: str) -> None:
    spec = Accelerator.parse(text)
    assert Accelerator.parse(str(spec)) == spec
    assert str(Accelerator.parse(str(spec))) == str(spec)
    assert hash(Accelerator.parse(str(spec))) == hash(spec)


def test_canonical_strings() -> None:
    assert str(Accelerator.parse("h100:8")) == "H100:8"
    assert str(Accelerator.parse("a100-40gb:4")) == "A100-40GB:4"
    assert str(Accelerator.parse("trn2:16")) == "Trainium2:16"
    assert str(Accelerator.parse("H100-NVL")) == "H100-94GB-NVL"
    assert str(Accelerator.parse("h100-mig-3g.40gb")) == "H100-80GB-MIG-3g.40gb"
    assert str(Accelerator.parse("A10G")) == "A10G"  # a single memory size is not spelled out


def test_keyword_constructor_equals_parse() -> None:
    assert Accelerator(type="H100", count=1, mig="3g.40gb") == Accelerator.parse("H100-MIG-3g.40gb")
    assert Accelerator(type="a100", memory_gb=40, count=4) == Accelerator.parse("A100-40GB:4")
    assert Accelerator(type="H100", form_factor="nvl") == Accelerator.parse("H100-NVL")
    assert Accelerator(type="H100", count="8") == Accelerator.parse("H100:8")


def test_model_validate_accepts_shorthand_and_model_is_frozen() -> None:
    spec = Accelerator.model_validate("H100:4")
    assert spec == Accelerator.parse("H100:4")
    with pytest.raises(ValueError, match="frozen"):
        spec.count = 8  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert Accelerator.model_validate(spec.model_dump()) == spec
    assert Accelerator.model_validate_json(spec.model_dump_json()) == spec


def test_spec_nests_in_other_pydantic_models() -> None:
    class Task(BaseModel):
        accelerator: Accelerator

    assert Task.model_validate({"accelerator": "L4:2"}).accelerator == Accelerator.parse("L4:2")
    with pytest.raises(ValueError, match="did you mean 'L4'"):
        Task.model_validate({"accelerator": "L5:2"})


def test_parse_passes_a_spec_through() -> None:
    spec = Accelerator.parse("T4")
    assert Accelerator.parse(spec) is spec


def test_derived_fields() -> None:
    h100 = Accelerator.parse("H100:8")
    assert (h100.vendor, h100.architecture, h100.compute_capability, h100.min_cuda) == (
        "nvidia",
        "Hopper",
        "9.0",
        "11.8",
    )
    assert h100.device_memory_gb == 80  # smallest H100 variant: any H100 has at least this
    assert h100.devices == 8
    mig = Accelerator.parse("H100-MIG-1g.10gb:3")
    assert (mig.device_memory_gb, mig.devices, mig.mig_profile.max_instances) == (10, 0, 7)  # type: ignore[union-attr]
    trn = Accelerator.parse("trn2:16")
    assert (trn.vendor, trn.architecture, trn.compute_capability) == ("aws", "NeuronCore-v3", None)
    assert Accelerator.parse("MI300X").vendor == "amd"
    assert Accelerator.parse("TPU-v5p:4").vendor == "google"
    assert [v.label for v in Accelerator.parse("H100-80GB").variants] == ["80 GB SXM", "80 GB PCIe"]


# Each bad input, the field the error names, and a fragment a person can act on.
ERRORS = [
    ("H10", "type", "did you mean 'H100'"),
    ("A10", "type", "did you mean"),
    ("RTX9090", "type", "accepted: V100, T4"),
    ("H100:0", "count", "must be at least 1"),
    ("H100:-2", "count", "must be at least 1"),
    ("H100:9", "count", "one node offers at most 8 H100"),
    ("H100:two", "count", "not a whole number"),
    ("TPU-v5e:2", "count", "accepted: 1, 4, 8"),
    ("A100-50GB", "memory_gb", "accepted: 40 GB, 80 GB"),
    ("H100-80GB-NVL", "form_factor", "H100 94 GB NVL"),
    ("L4-SXM", "form_factor", "accepted: PCIe"),
    ("T4-MIG-1g.5gb", "mig", "T4 does not support MIG"),
    ("H100-MIG-3g.20gb", "mig", "H100-80GB: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb"),
    ("A100-80GB-MIG-1g.5gb", "mig", "A100-80GB: 1g.10gb"),
    ("H100-MIG-banana", "mig", "not a MIG profile name"),
    ("H100-MIG-3g.40gb:3", "count", "at most 2 instances of MIG 3g.40gb"),
    ("A100-MIG-1g.5gb:8", "count", "at most 7 instances"),
    ("H100-MIG-7g.80gb:2", "count", "is the whole GPU"),
    ("H100-quantum", "spec", "cannot read 'quantum'"),
    ("", "spec", "empty accelerator spec"),
    (":4", "type", "no accelerator name"),
]


@pytest.mark.parametrize(("text", "field", "fragment"), ERRORS)
def test_errors_name_field_value_and_what_is_accepted(text: str, field: str, fragment: str) -> None:
    with pytest.raises(AcceleratorSpecError) as caught:
        Accelerator.parse(text)
    assert caught.value.field == field
    assert fragment in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_keyword_errors() -> None:
    with pytest.raises(AcceleratorSpecError, match="accelerator count 'x': must be a whole number"):
        Accelerator(type="H100", count="x")
    with pytest.raises(AcceleratorSpecError, match="accelerator count True"):
        Accelerator(type="H100", count=True)
    with pytest.raises(AcceleratorSpecError, match="accelerator spec 'colour': unknown field"):
        Accelerator(type="H100", colour="red")
    with pytest.raises(AcceleratorSpecError, match="accelerator type None: is required"):
        Accelerator(count=2)
    with pytest.raises(AcceleratorSpecError, match="accelerator mig"):
        Accelerator(type="H100", mig=3)
    with pytest.raises(AcceleratorSpecError, match="expected a string or an Accelerator, got int"):
        Accelerator.parse(8)  # type: ignore[arg-type]


def test_suggestions_use_aliases() -> None:
    with pytest.raises(AcceleratorSpecError, match="did you mean 'Trainium' or 'Trainium2'"):
        Accelerator.parse("trn3:16")


@settings(max_examples=examples(400), deadline=None)
@given(st.text(max_size=40))
def test_any_text_parses_or_raises_value_error(text: str) -> None:
    try:
        spec = Accelerator.parse(text)
    except ValueError:
        return
    assert Accelerator.parse(str(spec)) == spec


_NAMES = st.sampled_from([*catalog.aliases(), *catalog.names()])
_SHORTHAND_PIECES = st.tuples(
    _NAMES,
    st.sampled_from(["", "-16GB", "-40GB", "-80GB", "-94gb", "-sxm", "-pcie", "-nvl", "-141GB"]),
    st.sampled_from(["", "-MIG-1g.10gb", "-mig-3g.40gb", "-MIG-1g.5gb", "-mig-7g.141gb"]),
    st.sampled_from(["", ":1", ":2", ":4", ":7", ":8", ":16", ":0"]),
)


@settings(max_examples=examples(400), deadline=None)
@given(_SHORTHAND_PIECES)
def test_plausible_shorthand_round_trips_or_fails_cleanly(pieces: tuple[str, str, str, str]) -> None:
    text = "".join(pieces)
    try:
        spec = Accelerator.parse(text)
    except AcceleratorSpecError as error:
        assert error.field in {"type", "count", "memory_gb", "form_factor", "mig", "spec"}
        return
    assert Accelerator.parse(str(spec)) == spec
    assert spec.type in catalog.names()
    assert spec.variants, "a valid spec always matches a catalog variant"
