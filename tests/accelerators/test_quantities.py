"""CPU and memory amounts: the forms users write, and property tests of the parser."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu import AcceleratorSpecError
from airflow_gpu.accelerators import quantities as q


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (512, 512 * 2**20),
        ("512Mi", 512 * 2**20),
        ("64Gi", 64 * 2**30),
        ("1.5Gi", 3 * 2**29),
        ("1G", 10**9),
        ("1000", 1000),
        ("2Ti", 2 * 2**40),
        ("100k", 10**5),
        (" 8Gi ", 8 * 2**30),
    ],
)
def test_memory_bytes(value: int | str, expected: int) -> None:
    assert q.memory_bytes(value) == expected


@pytest.mark.parametrize("value", ["", "lots", "64GB", "-1Gi", "0", 0, -5, True, "1e3", "Gi"])
def test_bad_memory_names_the_field(value: object) -> None:
    with pytest.raises(AcceleratorSpecError, match="^memory ") as caught:
        q.memory_bytes(value)  # type: ignore[arg-type]
    assert "64Gi" in str(caught.value)  # says what is accepted


def test_memory_mib_rounds_up_and_quantity_keeps_strings() -> None:
    assert q.memory_mib("1G") == 954  # 10^9 bytes is 953.67 MiB: never round a request down
    assert q.memory_quantity(4096) == "4096Mi"
    assert q.memory_quantity(" 64Gi") == "64Gi"


@pytest.mark.parametrize(
    ("value", "cores", "quantity"),
    [
        (8, Decimal(8), "8"),
        (0.5, Decimal("0.5"), "500m"),
        ("250m", Decimal("0.25"), "250m"),
        ("4", Decimal(4), "4"),
        ("1.5", Decimal("1.5"), "1500m"),
    ],
)
def test_cpu(value: object, cores: Decimal, quantity: str) -> None:
    assert q.cpu_cores(value) == cores  # type: ignore[arg-type]
    assert q.cpu_quantity(value) == quantity  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["", "many", "0", -1, True, "nan", "inf", "m", [1]])
def test_bad_cpu(value: object) -> None:
    with pytest.raises(AcceleratorSpecError, match="^cpu "):
        q.cpu_cores(value)  # type: ignore[arg-type]


@given(st.integers(min_value=1, max_value=2**40), st.sampled_from(["", "Ki", "Mi", "Gi", "k", "M", "G"]))
def test_memory_quantities_scale_exactly(number: int, suffix: str) -> None:
    scale = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 10**3, "M": 10**6, "G": 10**9}[suffix]
    assert q.memory_bytes(f"{number}{suffix}") == number * scale
    assert q.memory_mib(f"{number}{suffix}") * 2**20 >= number * scale


@given(st.one_of(st.text(max_size=12), st.integers(), st.floats(), st.booleans(), st.none()))
def test_any_input_is_an_amount_or_a_value_error(value: object) -> None:
    for parse in (q.memory_bytes, q.cpu_cores):
        try:
            result = parse(value)  # type: ignore[arg-type]
        except ValueError:
            continue
        assert result > 0
