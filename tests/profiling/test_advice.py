"""Advice from hand-made summaries whose right answer is known: each kind fires when the numbers
call for it and stays quiet otherwise, and a metric the GPU did not report gives no advice."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.accelerators.catalog import MigProfile
from airflow_gpu.accelerators.spec import Accelerator
from airflow_gpu.profiling import advice
from airflow_gpu.profiling.advice import advise

GIB = 1024.0  # MiB


def summary(gpu: int = 0, **fields: Any) -> dict[str, Any]:
    """A busy, healthy GPU's summary (A100 80 GB, 10 minutes at 1 Hz) with ``fields`` changed."""
    base: dict[str, Any] = {
        "gpu": gpu, "uuid": f"GPU-{gpu}", "name": "NVIDIA A100-SXM4-80GB", "samples": 600, "seconds": 599.0,
        "util_mean": 80.0, "util_p95": 97.0, "fb_peak": 70 * GIB, "fb_total": 80 * GIB, "power_mean": 300.0,
        "power_peak": 400.0, "energy_wh": 50.0, "energy_source": "counter", "idle_fraction": 0.02,
    }  # fmt: skip
    return {**base, **fields}


def kinds(found: list[advice.Advice]) -> list[str]:
    return [a.kind for a in found]


def by_kind(found: list[advice.Advice], kind: str) -> advice.Advice:
    return next(a for a in found if a.kind == kind)


def test_a_busy_gpu_that_fits_its_memory_gets_no_advice() -> None:
    assert advise([summary()], "A100-80GB") == []


def test_a_small_peak_on_a_lightly_used_gpu_names_the_smaller_gpus_that_hold_it() -> None:
    found = advise([summary(fb_peak=14.2 * GIB, util_p95=12.0)], "A100-80GB")
    smaller = by_kind(found, "smaller-gpu")
    assert smaller.message.startswith(
        "peak 14.2 GiB of 80.0 GiB and p95 utilisation 12%: A10G or L4 (24 GB) would hold it with 25% to spare"
    )
    assert "they have a fraction of this GPU's compute" in smaller.message and "takes longer" in smaller.message
    # T4 (16 GB) would not hold 14.2 GiB with headroom, and it cannot run the bf16 an A100 job may use.
    assert smaller.detail["gpus"] == ["A10G", "L4"] and smaller.detail["memory_gb"] == 24
    assert smaller.detail["util_p95"] == 12.0 and smaller.detail["memory_only"] is False
    assert smaller.detail["max_util_p95"] == advice.SMALLER_GPU_MAX_UTIL_P95


@pytest.mark.parametrize("util_p95", [advice.SMALLER_GPU_MAX_UTIL_P95, 60.0, 97.0, 100.0])
def test_a_busy_gpu_is_not_sent_to_a_smaller_one_however_little_memory_it_used(util_p95: float) -> None:
    # A busy H100 job on an L4 runs 5-10 times longer: 1 GiB of memory says nothing about compute.
    found = advise([summary(fb_peak=1 * GIB, util_p95=util_p95, name="NVIDIA H100 80GB HBM3")], "H100")
    assert "smaller-gpu" not in kinds(found)


def test_just_under_the_utilisation_threshold_a_smaller_gpu_is_advised() -> None:
    below = advice.SMALLER_GPU_MAX_UTIL_P95 - 0.5
    found = advise([summary(fb_peak=1 * GIB, util_p95=below, name="NVIDIA H100 80GB HBM3")], "H100")
    assert by_kind(found, "smaller-gpu").detail["gpus"] == ["L4"]


def test_without_a_utilisation_reading_the_smaller_gpu_is_memory_only_advice() -> None:
    smaller = by_kind(advise([summary(fb_peak=14.2 * GIB, util_p95=None)], "A100-80GB"), "smaller-gpu")
    assert smaller.message.startswith("peak 14.2 GiB of 80.0 GiB: A10G or L4 (24 GB) would hold it")
    assert "judged on memory alone" in smaller.message and "compute-bound" in smaller.message
    assert smaller.detail["memory_only"] is True and smaller.detail["util_p95"] is None


def test_several_gpus_are_judged_by_the_busiest() -> None:
    light = [summary(0, fb_peak=10 * GIB, util_p95=10.0), summary(1, fb_peak=12 * GIB, util_p95=20.0)]
    smaller = by_kind(advise(light, "A100-80GB:2"), "smaller-gpu")
    assert "p95 utilisation at most 20%" in smaller.message and smaller.detail["util_p95"] == 20.0
    busy = [summary(0, fb_peak=10 * GIB, util_p95=10.0), summary(1, fb_peak=12 * GIB, util_p95=90.0)]
    assert "smaller-gpu" not in kinds(advise(busy, "A100-80GB:2"))
    # One GPU without a reading: the advice rests on memory alone, and says so.
    unknown = [summary(0, fb_peak=10 * GIB, util_p95=10.0), summary(1, fb_peak=12 * GIB, util_p95=None)]
    assert by_kind(advise(unknown, "A100-80GB:2"), "smaller-gpu").detail["memory_only"] is True


def test_no_smaller_gpu_when_only_this_size_holds_the_peak() -> None:
    found = advise([summary(fb_peak=19 * GIB, fb_total=23028.0, util_p95=60.0)], "A10G")
    assert "smaller-gpu" not in kinds(found)


def test_fp8_gpus_suggest_only_gpus_that_run_fp8() -> None:
    found = advise([summary(fb_peak=14.2 * GIB, util_p95=10.0, name="NVIDIA H100 80GB HBM3")], "H100")
    assert by_kind(found, "smaller-gpu").detail["gpus"] == ["L4"]  # A10G has no fp8


@pytest.mark.parametrize(
    ("spec", "peak_gib", "util_p95", "profile"),
    [
        ("A100-80GB", 14.2, 10.0, "1g.20gb"),  # 1/7 of the SMs is 14% >= 10%
        ("A100-80GB", 14.2, 25.0, "2g.20gb"),  # 25% needs 2/7
        ("A100-80GB", 14.2, None, "1g.20gb"),  # no utilisation reading: memory alone decides
        ("A100-40GB", 4.0, 5.0, "1g.10gb"),  # 1g.5gb holds 4.66 GiB, less than 4 GiB + 25%
        ("H100", 28.0, 30.0, "3g.40gb"),
        ("H200", 50.0, 40.0, "3g.71gb"),  # 62.5 GiB needed, 66.1 GiB in 71 GB
    ],
)
def test_a_single_gpu_job_gets_the_smallest_mig_profile_that_holds_it(
    spec: str, peak_gib: float, util_p95: float | None, profile: str
) -> None:
    total = Accelerator.parse(spec).variants[0].memory_gb * GIB
    found = advise([summary(fb_peak=peak_gib * GIB, fb_total=total, util_p95=util_p95)], spec)
    mig = by_kind(found, "mig")
    assert mig.detail["profile"] == profile
    assert f"MIG {profile}" in mig.message
    asked = mig.message.split("ask for '")[1].split("'")[0]
    assert Accelerator.parse(asked).mig == profile  # the spec it names is one the parser accepts
    assert ("utilisation was not reported" in mig.message) is (util_p95 is None)


@pytest.mark.parametrize(
    ("spec", "summaries"),
    [
        ("A100-80GB:2", [summary(0, fb_peak=10 * GIB, util_p95=10.0), summary(1, fb_peak=10 * GIB, util_p95=10.0)]),
        ("A100-80GB", [summary(fb_peak=10 * GIB, util_p95=70.0)]),  # needs more than 4/7 of the SMs
        ("A100-80GB-MIG-3g.40gb", [summary(fb_peak=10 * GIB, fb_total=40 * GIB, util_p95=None)]),  # already MIG
        ("A10G", [summary(fb_peak=4 * GIB, fb_total=23028.0, util_p95=10.0)]),  # no MIG on A10G
        ("H100", [summary(fb_peak=31 * GIB, util_p95=10.0)]),  # 38.75 GiB: no slice short of 7g.80gb holds it
    ],
)
def test_no_mig_advice_where_a_slice_does_not_fit_the_job(spec: str, summaries: list[dict[str, Any]]) -> None:
    assert "mig" not in kinds(advise(summaries, spec))


PROFILES = [MigProfile("1g.10gb", 7), MigProfile("1g.20gb", 4), MigProfile("2g.20gb", 3), MigProfile("3g.40gb", 2),
            MigProfile("4g.40gb", 1), MigProfile("7g.80gb", 1)]  # fmt: skip


@given(peak_gib=st.floats(min_value=0.1, max_value=79), util_p95=st.one_of(st.none(), st.floats(0, 100)))
def test_the_chosen_profile_is_the_smallest_that_holds_memory_and_load(peak_gib: float, util_p95: float | None) -> None:
    variant = Accelerator.parse("A100-80GB").variants[0]
    need = peak_gib * advice.MEMORY_HEADROOM
    chosen = advice._mig_profile(variant, need, util_p95)

    def fits(p: MigProfile) -> bool:
        enough_memory = p.memory_gb * 1e9 / 2**30 >= need
        return p.compute_slices < 7 and enough_memory and (util_p95 is None or p.compute_slices / 7 * 100 >= util_p95)

    fitting = [p for p in PROFILES if fits(p)]
    if not fitting:
        assert chosen is None
    else:
        assert chosen is not None and fits(chosen)
        assert chosen.memory_gb == min(p.memory_gb for p in fitting)


def test_idle_most_of_the_time_points_at_the_input_pipeline() -> None:
    found = advise([summary(idle_fraction=0.8, util_mean=12.0)], "A100-80GB")
    idle = by_kind(found, "idle")
    assert "idle 80% of the time" in idle.message and "DataLoader" in idle.message
    assert idle.detail["idle_fraction"] == 0.8


@pytest.mark.parametrize("idle_fraction", [0.3, 0.5, None])
def test_no_idle_advice_when_the_gpu_mostly_worked_or_did_not_say(idle_fraction: float | None) -> None:
    assert "idle" not in kinds(advise([summary(idle_fraction=idle_fraction)], "A100-80GB"))


def test_one_busy_gpu_among_idle_ones_is_multi_gpu_unused() -> None:
    idle = {"idle_fraction": 0.99, "util_mean": 0.2, "util_p95": 1.0, "fb_peak": 0.5 * GIB, "fb_total": 23028.0}
    found = advise(
        [summary(0, fb_total=23028.0, fb_peak=18 * GIB), summary(1, **idle), summary(2, **idle), summary(3, **idle)],
        "A10G:4",
    )
    unused = by_kind(found, "multi-gpu-unused")
    assert unused.detail == {"used": [0], "unused": [1, 2, 3], "least_idle_fraction": 0.99}
    assert "used 1 of 4 GPUs" in unused.message and "('A10G')" in unused.message and "DDP" in unused.message
    assert "idle" not in kinds(found)  # the unused GPUs are not also reported as an idle job


@pytest.mark.parametrize(
    "summaries",
    [
        [summary(0), summary(1), summary(2)],  # all worked
        [summary(0, idle_fraction=0.95), summary(1, idle_fraction=0.97)],  # all idle: that is "idle"
        [summary(0, idle_fraction=0.99)],  # one GPU
        [summary(0), summary(1, idle_fraction=None)],  # the second GPU gave no utilisation reading
    ],
)
def test_no_multi_gpu_advice_unless_some_gpus_worked_and_others_did_not(summaries: list[dict[str, Any]]) -> None:
    assert "multi-gpu-unused" not in kinds(advise(summaries, "A100-80GB:4"))


def test_all_gpus_idle_is_idle_advice() -> None:
    found = advise([summary(0, idle_fraction=0.95), summary(1, idle_fraction=0.97)], "A100-80GB:2")
    assert kinds(found) == ["idle"] and by_kind(found, "idle").message.startswith("The GPUs were idle 96%")


def test_memory_near_the_limit_names_a_bigger_variant_and_the_usual_cures() -> None:
    found = advise([summary(fb_peak=78 * GIB)], "A100-80GB")
    near = by_kind(found, "memory-near-limit")
    assert "78.0 of 80.0 GiB (98%)" in near.message
    assert near.detail["bigger"] == ["H100-94GB", "H200"]
    assert "gradient checkpointing" in near.message and "smaller batch" in near.message
    assert "smaller-gpu" not in kinds(found) and "mig" not in kinds(found)


def test_memory_near_the_limit_says_it_may_be_a_preallocated_pool_and_how_to_tell() -> None:
    near = by_kind(advise([summary(fb_peak=78 * GIB)], "A100-80GB"), "memory-near-limit")
    message = near.message
    # The frameworks that reserve a fixed share up front, and their shares.
    for named in ("TensorFlow", "JAX 75%", "vLLM", "gpu_memory_utilization, 0.9"):
        assert named in message, named
    # What to check before acting: each framework's own peak, or preallocation off.
    for check in ("torch.cuda.max_memory_allocated()", "get_memory_info('GPU:0')['peak']", "peak_bytes_in_use",
                  "TF_FORCE_GPU_ALLOW_GROWTH=true", "XLA_PYTHON_CLIENT_PREALLOCATE=false"):  # fmt: skip
        assert check in message, check
    # The bigger GPU is the cure only if the need is real, and said after the check.
    assert (
        message.index("may be memory reserved")
        < message.index("If the job really needs it")
        < message.index("ask for H100-94GB or H200")
    )
    assert near.detail["may_be_preallocated"] is True


def test_a_preallocated_pool_on_an_idle_gpu_gets_no_smaller_gpu_or_mig_advice() -> None:
    # TensorFlow reserved 98% of an A100 that was barely used: the peak is the pool, not the need,
    # so neither a smaller GPU nor a MIG slice is suggested on its strength (nor against it).
    found = advise([summary(fb_peak=78.5 * GIB, util_p95=8.0, util_mean=4.0, idle_fraction=0.7)], "A100-80GB")
    assert kinds(found) == ["memory-near-limit", "idle"]


def test_a_smaller_variant_near_its_limit_is_told_about_the_bigger_one() -> None:
    near = by_kind(advise([summary(fb_peak=38 * GIB, fb_total=40 * GIB)], "A100-40GB"), "memory-near-limit")
    assert near.detail["bigger"] == ["A100-80GB"]


@pytest.mark.parametrize("share", [0.5, 0.85, 0.9])
def test_no_memory_warning_at_or_below_the_threshold(share: float) -> None:
    assert "memory-near-limit" not in kinds(advise([summary(fb_peak=share * 80 * GIB)], "A100-80GB"))


@pytest.mark.parametrize(
    "summaries",
    [
        [],
        [summary(samples=0, seconds=0.0)],
        [summary(samples=advice.MIN_SAMPLES - 1, fb_peak=78 * GIB, idle_fraction=0.9)],  # too few to judge
    ],
)
def test_no_advice_without_samples(summaries: list[dict[str, Any]]) -> None:
    assert advise(summaries, "A100-80GB") == []


def test_metrics_the_gpu_did_not_report_give_no_advice() -> None:
    silent = summary(util_mean=None, util_p95=None, fb_peak=None, fb_total=None, idle_fraction=None)
    assert advise([silent], "A100-80GB") == []
    # Without a total the memory share is unknown: no near-limit warning, even for a large peak.
    assert "memory-near-limit" not in kinds(advise([summary(fb_peak=79.9 * GIB, fb_total=None)], "A100-80GB"))


def test_accelerators_that_are_not_gpus_get_no_advice() -> None:
    assert advise([summary(fb_peak=1 * GIB, idle_fraction=0.9)], "Trainium") == []


def test_advice_is_json() -> None:
    found = advise([summary(fb_peak=14.2 * GIB, util_p95=10.0, idle_fraction=0.7)], "A100-80GB")
    assert kinds(found) == ["smaller-gpu", "mig", "idle"]
    as_json = [a.to_json() for a in found]
    assert json.loads(json.dumps(as_json, allow_nan=False)) == as_json


@pytest.mark.parametrize(
    "fields",
    [
        {"fb_peak": 10**400, "util_p95": 10**400, "idle_fraction": 10**400},  # no float holds these ints
        {"fb_peak": float("inf"), "fb_total": float("nan"), "util_p95": float("-inf")},
        {"fb_peak": 1e300, "fb_total": 1e-300},  # the share overflows to inf
        {"gpu": None, "fb_peak": "14", "idle_fraction": True},
    ],
)
def test_unreadable_numbers_are_no_reading_never_an_error_or_inf(fields: dict[str, Any]) -> None:
    found = advise([summary(**fields), summary(1, idle_fraction=0.99)], "A100-80GB:2")
    json.dumps([a.to_json() for a in found], allow_nan=False)
