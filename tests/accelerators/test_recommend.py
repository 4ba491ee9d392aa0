"""``recommend`` follows its stated memory model; the figures below are that model worked by hand."""

from __future__ import annotations

import pytest

from airflow_gpu import Accelerator, AcceleratorSpecError, recommend
from airflow_gpu.accelerators.recommend import (
    DEVICE_RESERVE,
    estimate_memory,
    not_fitting,
    parse_parameter_count,
    unsupported,
)


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("7B", 7 * 10**9),
        ("7b", 7 * 10**9),
        ("1.5B", 1_500_000_000),
        ("350M", 350 * 10**6),
        ("1.2T", 1_200 * 10**9),
        (7_000_000_000, 7 * 10**9),
        ("123", 123),
    ],
)
def test_parameter_counts(text: str | int, count: int) -> None:
    assert parse_parameter_count(text) == count


@pytest.mark.parametrize("bad", ["7Q", "", "B", "-7B", 0, True])
def test_bad_parameter_counts(bad: object) -> None:
    with pytest.raises(AcceleratorSpecError, match="params"):
        parse_parameter_count(bad)  # type: ignore[arg-type]


def test_inference_memory_is_weights_plus_margin() -> None:
    estimate = estimate_memory("7B", "inference", "bf16")
    assert estimate.weights_gb == pytest.approx(14.0)
    assert estimate.gradients_gb == estimate.optimizer_gb == 0
    assert estimate.total_gb == pytest.approx(14.0 * 1.2)


def test_full_finetune_counts_gradients_and_adam_state() -> None:
    estimate = estimate_memory("7B", "finetune", "bf16")
    # 2 (weights) + 2 (gradients) + 12 (Adam moments + fp32 master) bytes per parameter, +30%
    assert estimate.weights_gb + estimate.gradients_gb + estimate.optimizer_gb == pytest.approx(7 * 16)
    assert estimate.total_gb == pytest.approx(7 * 16 * 1.3)
    fp32 = estimate_memory("7B", "finetune", "fp32")
    assert fp32.weights_gb + fp32.gradients_gb + fp32.optimizer_gb == pytest.approx(7 * 16)  # 4 + 4 + 8


def test_lora_trains_one_percent() -> None:
    estimate = estimate_memory("70B", "lora", "int4")
    assert estimate.weights_gb == pytest.approx(35.0)
    assert estimate.gradients_gb == pytest.approx(0.7 * 2)
    assert estimate.optimizer_gb == pytest.approx(0.7 * 12)


def test_recommend_gives_the_fewest_devices_that_hold_it() -> None:
    results = {str(r.accelerator): r for r in recommend("70B", "inference", "bf16", include_mig=False)}
    need = 70 * 2 * 1.2  # 168 GB
    usable = 1 - DEVICE_RESERVE
    assert "H100-80GB:3" in results  # 3 x 72 GB usable >= 168 GB > 2 x 72
    assert 3 * 80 * usable >= need > 2 * 80 * usable
    assert "H200:2" in results and "B200:2" in results  # 126.9 and 162 GB usable: one is not enough
    assert "MI300X" in results  # 192 GB x 0.9 = 172.8 GB usable holds it alone
    assert "H100-94GB:2" in results  # NVL: 2 x 84.6 GB
    assert all(r.headroom_gb >= 0 for r in results.values())
    usable_order = [r.usable_gb for r in recommend("70B", "inference", "bf16")]
    assert usable_order == sorted(usable_order)


def test_recommend_offers_a_mig_slice_when_it_fits() -> None:
    results = [str(r.accelerator) for r in recommend("1B", "inference", "bf16", vendors=("nvidia",))]
    assert "A100-40GB-MIG-1g.5gb" in results  # 2.4 GB fits 4.5 usable
    assert "H100-80GB-MIG-1g.10gb" in results
    assert all(Accelerator.parse(text) for text in results)


def test_precision_support_filters_types() -> None:
    assert {"V100", "T4", "A100", "A10G"} <= set(unsupported("fp8"))
    results = {r.accelerator.type for r in recommend("7B", "inference", "fp8")}
    assert "A100" not in results and "H100" in results and "L4" in results
    assert "T4" not in {r.accelerator.type for r in recommend("1B", "inference", "bf16")}


def test_too_big_for_one_node() -> None:
    assert not recommend("1T", "pretrain", "bf16")
    assert "H100" in not_fitting("1T", "pretrain", "bf16")


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"task": "distill"}, "task 'distill': unknown task"),
        ({"precision": "fp64"}, "precision 'fp64': unknown precision"),
        ({"task": "finetune", "precision": "int4"}, "cannot store"),
        ({"vendors": ("intel",)}, "vendor 'intel'"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(AcceleratorSpecError, match=fragment):
        recommend("7B", **kwargs)  # type: ignore[arg-type]
