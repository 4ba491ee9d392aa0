"""The XCom ``gpu_profile`` document, from payloads as the container prints them and from none."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_gpu.accelerators.spec import Accelerator
from airflow_gpu.plugins import pages
from airflow_gpu.profiling import prices, report
from airflow_gpu.profiling.nvml import NvmlSampler
from airflow_gpu.profiling.report import build_profile, smallest_instance
from airflow_gpu.testing.polling import wait_for
from tests.properties import examples

from .fake_nvml import FakeGpu, FakeNvml

GIB = 1024.0


def gpu_summary(gpu: int, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "gpu": gpu, "uuid": f"GPU-{gpu}", "name": "NVIDIA A10G", "samples": 360, "seconds": 359.0,
        "util_mean": 60.0, "util_p95": 90.0, "fb_peak": 19 * GIB, "fb_total": 23028.0, "power_mean": 150.0,
        "power_peak": 200.0, "energy_wh": 15.0, "energy_source": "counter", "idle_fraction": 0.1,
    }  # fmt: skip
    return {**base, **fields}


def payload(summaries: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A version-1 payload of a 6-minute run, as the entrypoint prints it."""
    base: dict[str, Any] = {
        "v": 1, "source": "nvml", "note": None, "interval": 1.0, "started": 1763900000.0, "ended": 1763900360.0,
        "exit_code": 0, "signals": [], "spot_notice": None, "driver": "550.54.15", "cuda": "12.4",
        "gpus": [{"index": s["gpu"], "uuid": s["uuid"], "name": s["name"], "fb_total": s["fb_total"], "mig": False,
                  "pci": None} for s in summaries],
        "topology": None, "summary": summaries, "samples_taken": sum(s["samples"] for s in summaries),
        "series": [{"gpu": s["gpu"], "time": [1763900000.0, 1763900360.0], "gpu_util": [50.0, 70.0]}
                   for s in summaries],
        "series_points": 240,
    }  # fmt: skip
    return {**base, **fields}


def build(data: dict[str, Any] | None, accelerator: str = "A10G:4", **options: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "capacity": "on-demand", "backend": "batch", "workload": "job-123", "instance_type": None,
        "interruptions": 0, "warning": None, **options,
    }  # fmt: skip
    return build_profile(data, accelerator=accelerator, **arguments)


def test_a_profiled_task_adds_up_its_gpus() -> None:
    summaries = [gpu_summary(i) for i in range(4)]
    summaries[3]["util_mean"] = None  # a GPU without a utilisation reading is left out of the mean
    summaries[2]["energy_wh"] = None
    summaries[1]["util_mean"] = 30.0
    data = payload(summaries)
    before = copy.deepcopy(data)
    document = build(data, capacity="spot", interruptions=1)
    assert data == before  # the payload is not changed
    assert document["v"] == 1 and document["empty"] is False and document["note"] is None
    assert (document["backend"], document["workload"], document["accelerator"]) == ("batch", "job-123", "A10G:4")
    assert (document["capacity"], document["instance_type"], document["interruptions"]) == ("spot", None, 1)
    assert document["duration_s"] == 360.0
    assert document["gpu_hours"] == pytest.approx(4 * 359 / 3600, abs=1e-6)
    assert document["energy_wh"] == 45.0
    assert document["util_mean"] == 50.0  # (60 + 30 + 60) / 3
    for name in ("driver", "cuda", "gpus", "summary", "series", "series_points", "samples_taken", "source"):
        assert document[name] == data[name]
    assert json.loads(json.dumps(document)) == document


def test_the_cost_of_a_batch_job_without_its_instance_type_is_estimated_on_the_smallest_that_fits() -> None:
    document = build(payload([gpu_summary(i) for i in range(4)]), backend="batch")
    cost = document["cost"]
    on_demand = prices.load().price("g5.12xlarge", "on-demand")
    assert on_demand is not None
    assert cost["instance_type"] == "g5.12xlarge" and cost["capacity"] == "on-demand"
    assert cost["usd"] == pytest.approx(round(5.672 / 4 * (4 * 359 / 3600), 4))
    assert cost["usd_per_hour"] == 5.672
    assert cost["basis"].startswith(
        "4 of 4 GPUs of g5.12xlarge for 0.10 h at the us-east-1 on-demand price of 2026-02-09"
    )
    assert (
        "AWS Batch did not report the instance type it chose: estimated as g5.12xlarge, the catalog's smallest AWS "
        "instance with 4 A10G"
    ) in cost["basis"]
    assert (cost["prices_date"], cost["source"]) == (on_demand.date, on_demand.source)
    assert document["cost_note"] is None


@pytest.mark.parametrize("instance_type", [None, "g5.12xlarge"])
def test_the_basis_names_the_region_and_what_the_cost_leaves_out(instance_type: str | None) -> None:
    basis = build(payload([gpu_summary(i) for i in range(4)]), instance_type=instance_type)["cost"]["basis"]
    assert f"at the {prices.load().region} on-demand price" in basis
    assert "the sampled GPU time only: image pull, start-up and teardown are not in it" in basis


@pytest.mark.parametrize(("accelerator", "count"), [("H100", 1), ("A10G:4", 4), ("L4", 1)])
def test_a_kubernetes_task_without_its_nodes_instance_type_has_no_cost(accelerator: str, count: int) -> None:
    # The node may be GKE, AKS or on-premises, or the operator may not read nodes: no AWS price applies.
    document = build(
        payload([gpu_summary(i) for i in range(count)]), accelerator, backend="kubernetes", instance_type=None
    )
    assert document["cost"] is None
    assert document["cost_note"] == report.NO_INSTANCE_TYPE
    assert "no permission to read nodes" in document["cost_note"] and "not an AWS node" in document["cost_note"]


def test_a_kubernetes_task_on_a_known_aws_node_is_priced_without_a_guess() -> None:
    document = build(payload([gpu_summary(0, seconds=3600.0)]), "A10G", backend="kubernetes", instance_type="g5.xlarge")
    cost = document["cost"]
    assert cost["usd"] == pytest.approx(1.006) and "estimated as" not in cost["basis"]


def test_a_kubernetes_node_of_another_cloud_is_not_priced_as_aws() -> None:
    options = {"backend": "kubernetes", "instance_type": "a3-highgpu-1g"}
    document = build(payload([gpu_summary(0)]), "H100", **options)
    assert document["cost"] is None and "not an AWS instance type" in document["cost_note"]


def test_a_reported_instance_with_more_gpus_is_paid_by_share() -> None:
    document = build(payload([gpu_summary(i, seconds=3600.0) for i in range(4)]), instance_type="g5.48xlarge")
    cost = document["cost"]
    assert cost["usd"] == pytest.approx(16.288 / 8 * 4)  # half the instance for an hour
    assert cost["basis"].startswith("4 of 8 GPUs of g5.48xlarge for 1.00 h") and "not reported" not in cost["basis"]
    assert document["instance_type"] == "g5.48xlarge"


def test_spot_uses_the_dated_spot_snapshot() -> None:
    cost = build(payload([gpu_summary(0, seconds=3600.0)]), "A10G", capacity="spot")["cost"]
    spot = prices.load().price("g5.xlarge", "spot")
    assert spot is not None
    assert cost["usd"] == round(spot.usd_per_hour, 4) and cost["prices_date"] == spot.date == "2025-11-30"
    assert "snapshot" in cost["basis"]


def test_unreported_capacity_is_priced_on_demand_and_says_so() -> None:
    cost = build(payload([gpu_summary(0, seconds=3600.0)]), "A10G", capacity=None)["cost"]
    assert cost["capacity"] == "on-demand" and cost["usd"] == pytest.approx(1.006)
    assert cost["basis"].endswith("(the capacity was not reported: priced on demand)")


def test_a_mig_slice_pays_its_sevenths_of_a_gpu() -> None:
    mig = gpu_summary(0, name="NVIDIA A100-SXM4-80GB MIG 3g.40gb", fb_total=40 * GIB, util_mean=None, seconds=3600.0)
    document = build(payload([mig]), "A100-80GB-MIG-3g.40gb", instance_type="p4de.24xlarge")
    cost = document["cost"]
    assert cost["usd"] == pytest.approx(round(27.44705 / 8 * 3 / 7, 4))
    assert cost["basis"].startswith("1 MIG 3g.40gb slice (3/7 of a GPU each) of p4de.24xlarge for 1.00 h")


@pytest.mark.parametrize(
    ("accelerator", "options", "note"),
    [
        (
            "H100:8",
            {"capacity": "spot"},
            "no spot price for p5.48xlarge in us-east-1; its on-demand price was $55.04/h",
        ),
        ("A10G:4", {"instance_type": "x9.huge"}, "x9.huge is not an AWS instance type of the catalog"),
        ("MI300X", {}, "the catalog knows no AWS instance type carrying MI300X"),
        ("A10G:4", {"instance_type": "g5.xlarge"}, "4 GPUs were measured but g5.xlarge carries 1"),
    ],
)
def test_no_cost_where_no_figure_supports_one_and_the_note_says_why(
    accelerator: str, options: dict[str, Any], note: str
) -> None:
    count = Accelerator.parse(accelerator).count
    document = build(payload([gpu_summary(i) for i in range(count)]), accelerator, **options)
    assert document["cost"] is None
    assert note in document["cost_note"]


@pytest.mark.parametrize(
    ("accelerator", "instance"),
    [
        ("A10G:4", "g5.12xlarge"),
        ("A10G:2", "g5.12xlarge"),  # no g5 size has 2 GPUs
        ("T4", "g4dn.xlarge"),
        ("A100", "p4d.24xlarge"),  # any memory: the 40 GB one is as small
        ("A100-80GB", "p4de.24xlarge"),
        ("A100-80GB-MIG-3g.40gb:2", "p4de.24xlarge"),  # two slices share one GPU
        ("H100", "p5.4xlarge"),
        ("H100:2", "p5.48xlarge"),
        ("H200", "p5en.48xlarge"),  # as small as p5e.48xlarge, which has no price
        ("V100-32GB", "p3dn.24xlarge"),
        ("Inferentia2:6", "inf2.24xlarge"),
    ],
)
def test_smallest_instance_carrying_the_request(accelerator: str, instance: str) -> None:
    found = smallest_instance(Accelerator.parse(accelerator))
    assert found is not None and found.name == instance


@pytest.mark.parametrize("accelerator", ["MI300X", "TPU-v5e:4", "A100:16"])
def test_no_instance_where_aws_has_none(accelerator: str) -> None:
    assert smallest_instance(Accelerator.parse(accelerator)) is None


def test_no_payload_is_the_empty_state_with_the_warning_as_note() -> None:
    document = build(None, "H100:8", warning="marker line 3 of 5 missing: the profile was cut")
    assert document["empty"] is True
    assert document["note"] == "marker line 3 of 5 missing: the profile was cut"
    for name, value in report.EMPTY_PAYLOAD.items():
        assert document[name] == value or name == "note"
    assert (document["cost"], document["advice"], document["gpu_hours"]) == (None, [], 0.0)
    assert document["duration_s"] is None and document["energy_wh"] is None and document["util_mean"] is None
    assert document["accelerator"] == "H100:8" and document["workload"] == "job-123"
    assert json.loads(json.dumps(document)) == document


def test_no_payload_and_no_warning_still_says_why() -> None:
    assert build(None)["note"] == report.NO_PROFILE


def test_a_payload_without_samples_keeps_the_containers_reason() -> None:
    data = payload([], source="none", note="no NVIDIA driver", samples_taken=0)
    document = build(data)
    assert document["empty"] is True and document["note"] == "no NVIDIA driver"
    assert document["cost"] is None and "no GPU time was measured" in document["cost_note"]
    assert build(payload([], samples_taken=0))["note"] == report.NO_SAMPLES


def test_the_advice_comes_along() -> None:
    idle = {"idle_fraction": 0.99, "util_mean": 0.1, "util_p95": 1.0, "fb_peak": 0.3 * GIB}
    summaries = [gpu_summary(0), *(gpu_summary(i, **idle) for i in (1, 2, 3))]
    advice = build(payload(summaries))["advice"]
    assert [a["kind"] for a in advice] == ["multi-gpu-unused"]
    assert advice[0]["detail"]["unused"] == [1, 2, 3] and advice[0]["message"]


def test_the_document_adds_little_to_the_payload() -> None:
    # XCom lives in the Airflow database: the derived fields stay a small fixed overhead.
    data = payload([gpu_summary(i, fb_peak=2 * GIB, idle_fraction=0.7) for i in range(8)])
    document = build(data, "A10G:8")
    assert len(json.dumps(document)) - len(json.dumps(data)) < 4096


def test_a_started_after_ended_payload_has_no_duration_and_says_why() -> None:
    document = build(payload([gpu_summary(0)], started=10.0, ended=5.0), "A10G")
    assert document["duration_s"] is None
    assert document["malformed"] == ["ended: before started, so there is no duration"]
    assert "ended: before started" in document["note"]


def dumps(document: dict[str, Any]) -> str:
    """The document as the JSON twin routes send it: no NaN, no Infinity."""
    return json.dumps(document, allow_nan=False)


def test_a_summary_entry_without_a_gpu_index_is_dropped_and_noted() -> None:
    data = payload([gpu_summary(0), gpu_summary(1)])
    data["summary"][1]["gpu"] = None  # what made build_profile raise TypeError
    document = build(data, "A10G:2", instance_type="g5.12xlarge")
    assert [s["gpu"] for s in document["summary"]] == [0]
    assert document["malformed"] == ["summary[1]: dropped: gpu is not a GPU index"]
    assert document["note"] == "1 malformed part of the profile left out (summary[1]: dropped: gpu is not a GPU index)"
    assert document["gpu_hours"] == pytest.approx(359 / 3600, abs=1e-6)  # only GPU 0 is counted
    dumps(document)


def test_numbers_json_reads_as_inf_or_nan_become_null() -> None:
    text = json.dumps(payload([gpu_summary(0)])).replace('"seconds": 359.0', '"seconds": 1e999')
    text = text.replace('"fb_peak": 19456.0', '"fb_peak": NaN').replace('"ended": 1763900360.0', '"ended": -1e999')
    data = json.loads(text)
    assert data["summary"][0]["seconds"] == math.inf  # how json reads it
    document = build(data, "A10G", instance_type="g5.xlarge")
    assert document["summary"] == [] and document["empty"] is True and document["cost"] is None
    assert document["note"].startswith(report.MALFORMED_SUMMARIES)
    assert "ended: not a number" in document["note"] and document["duration_s"] is None
    dumps(document)


def test_a_huge_finite_figure_cannot_overflow_the_sums() -> None:
    # Each finite, but two of them add up to inf; and an int too big for a float.
    summaries = [gpu_summary(0, energy_wh=1.7e308, power_peak=10**400), gpu_summary(1, energy_wh=1.7e308)]
    document = build(payload(summaries), "A10G:2", instance_type="g5.12xlarge")
    assert document["energy_wh"] is None  # both readings were malformed
    assert document["summary"][0]["power_peak"] is None
    assert {"summary[0].energy_wh", "summary[1].energy_wh", "summary[0].power_peak"} <= {
        m.split(":")[0] for m in document["malformed"]
    }
    dumps(document)


def test_negative_durations_and_out_of_range_readings_are_left_out() -> None:
    summaries = [gpu_summary(0, seconds=-5.0), gpu_summary(1, util_mean=250.0, idle_fraction=-0.1)]
    document = build(payload(summaries, interval=-1.0), "A10G:2", instance_type="g5.12xlarge")
    assert [s["gpu"] for s in document["summary"]] == [1]
    assert document["summary"][0]["util_mean"] is None and document["summary"][0]["idle_fraction"] is None
    assert document["interval"] is None and document["util_mean"] is None
    assert len(document["malformed"]) == 4


def test_wrong_types_anywhere_are_nulled_and_the_rest_kept() -> None:
    data = payload([gpu_summary(0)])
    data.update(
        source=7, note=["x"], exit_code="0", signals=["SIGTERM", 15], driver=550, topology={"gpus": "GPU0"},
        gpus=[{"index": "0", "name": None, "fb_total": "lots", "mig": "no"}, "GPU-1"], samples_taken=-1,
        series=[{"gpu": 0, "time": [1.0, "x", None], "gpu_util": "hot"}, {"gpu": "zero"}], extra={"a": [1e999]},
    )  # fmt: skip
    document = build(data, "A10G", instance_type="g5.xlarge")
    assert document["summary"] == data["summary"] and document["empty"] is False and document["cost"] is not None
    assert (document["source"], document["exit_code"], document["driver"], document["topology"]) == (None,) * 4
    assert document["signals"] == ["SIGTERM"] and document["samples_taken"] is None
    assert document["gpus"] == [{"index": None, "uuid": None, "name": None, "fb_total": None, "mig": None, "pci": None}]
    assert document["series"] == [{"gpu": 0, "time": [1.0, None, None]}]
    assert document["extra"] == {"a": [None]}
    assert len(document["malformed"]) == report.MAX_REPORTED + 1 and document["malformed"][-1].startswith("... and ")
    dumps(document)


@pytest.mark.parametrize("data", [[1, 2], "profile", 3.5])
def test_a_payload_that_is_not_an_object_is_the_empty_state(data: Any) -> None:
    document = build(data)
    assert document["empty"] is True and document["note"] == report.NOT_AN_OBJECT
    dumps(document)


def test_the_empty_payload_template_is_not_shared_between_documents() -> None:
    first = build(None)
    first["gpus"].append("x")
    first["signals"].append("SIGKILL")
    assert build(None)["gpus"] == [] and report.EMPTY_PAYLOAD["signals"] == []


#: JSON as ``json.loads`` can return it from a workload's log, hostile numbers included.
JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    st.floats(),  # inf, -inf and nan included
    st.sampled_from([0, 1, -1, 0.5, 1e308, -1e308, 5e-324, 360.0, 1763900000.0]),
    st.text(max_size=8),
)
JSON = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@st.composite
def spoiled(draw: st.DrawFn, valid: dict[str, Any], extra_keys: list[str] | None = None) -> dict[str, Any]:
    """``valid`` with some fields replaced by any JSON, some removed and maybe some added."""
    result = dict(valid)
    for key in draw(st.lists(st.sampled_from(sorted(valid)), unique=True)):
        if draw(st.booleans()):
            result[key] = draw(JSON)
        else:
            del result[key]
    for key in draw(st.lists(st.sampled_from(extra_keys or ["extra"]), unique=True, max_size=2)):
        result[key] = draw(JSON)
    return result


@st.composite
def summaries(draw: st.DrawFn) -> list[Any]:
    """Plausible summaries (busy or idle, near the limit or not), some spoiled, some not objects at all."""
    found: list[Any] = []
    for gpu in range(draw(st.integers(0, 4))):
        valid = gpu_summary(
            gpu,
            samples=draw(st.sampled_from([0, 5, 600])),
            seconds=draw(st.floats(0, 1e6)),
            util_p95=draw(st.floats(0, 100)),
            idle_fraction=draw(st.floats(0, 1)),
            fb_peak=draw(st.floats(0, 23028.0)),
        )
        found.append(draw(st.one_of(st.just(valid), spoiled(valid), JSON)))
    return found


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    """A plausible payload, often spoiled (any field any JSON), and sometimes JSON of any shape in its place."""
    valid = payload([gpu_summary(i) for i in range(2)], summary=draw(summaries()))
    return draw(st.one_of(st.just(valid), spoiled(valid, ["extra", "cost", "advice", "empty"])))


def _all_numbers_finite(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _all_numbers_finite(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_all_numbers_finite(v) for v in value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value is None or isinstance(value, str | bool)
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int no float can hold: a reader that converts it would fail
        return False


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=payloads(),
    accelerator=st.sampled_from(["A10G:4", "H100", "A100-80GB:2", "A100-80GB-MIG-3g.40gb", "Trainium"]),
    backend=st.sampled_from(["kubernetes", "batch"]),
    instance_type=st.sampled_from([None, "g5.12xlarge", "p4de.24xlarge", "x9.huge"]),
    capacity=st.sampled_from([None, "spot", "on-demand"]),
)
def test_any_json_payload_gives_a_document_json_can_carry(
    data: dict[str, Any], accelerator: str, backend: str, instance_type: str | None, capacity: str | None
) -> None:
    document = build(data, accelerator, backend=backend, instance_type=instance_type, capacity=capacity)
    assert document["v"] == 1 and isinstance(document["empty"], bool)
    assert isinstance(document["note"], str | None) and isinstance(document["malformed"], list)
    assert _all_numbers_finite(document)
    assert json.loads(dumps(document)) == document


def test_a_mig_slice_never_reports_its_gpus_energy_as_its_own() -> None:
    """A MIG slice's summary as the samplers give it (NVML reports the whole GPU's power and energy
    counter, ``energy_scope="gpu"``), beside a whole GPU: the task's energy is the whole GPU's only,
    the slice's figures stay in its summary, marked, and the page labels them as the GPU's."""
    whole = gpu_summary(0, name="NVIDIA A100-SXM4-80GB", energy_wh=15.0)
    mig = gpu_summary(
        1, name="NVIDIA A100-SXM4-80GB", energy_wh=280.0, power_mean=390.0, power_peak=400.0, energy_scope="gpu"
    )
    document = build(payload([whole, mig]), "A100-80GB:2", instance_type="p4de.24xlarge")
    assert document["energy_wh"] == 15.0  # never 295: the 280 Wh are the whole GPU 1's, every slice's
    assert document["energy_note"] == report.PARENT_ENERGY.format(which="GPU 1")
    assert [s.get("energy_scope") for s in document["summary"]] == [None, "gpu"]

    html = pages.task_page(document, dag_id="d", run_id="r", task_id="t", map_index=-1, base="/gpu-profile")
    assert "280.0 Wh (counter; the whole GPU&#x27;s, not this MIG slice&#x27;s)" in html
    assert "390 W / 400 W (the whole GPU&#x27;s, not this MIG slice&#x27;s)" in html
    assert "15.0 Wh (counter)</td>" in html

    alone = build(payload([mig]), "A100-80GB-MIG-3g.40gb", instance_type="p4de.24xlarge")
    assert alone["energy_wh"] is None and alone["energy_note"] is not None
    assert (
        "280"
        not in pages.task_page(alone, dag_id="d", run_id="r", task_id="t", map_index=-1, base="/x").split(
            "<h2>Per GPU</h2>"
        )[0]
    )  # the cards above the per-GPU table show no energy


def test_a_mig_slice_profiled_end_to_end_is_marked_from_sample_to_document() -> None:
    """Fake NVML at the hardware boundary: GPU 1 of two in MIG mode, the task given one of its MIG
    devices; the sampler, summary, payload cleaning and document are real."""
    slice_uuid = "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"
    fake = FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-8a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", mig=True, migs=[slice_uuid])])
    sampler = NvmlSampler(0.05, nvml=fake, env={"NVIDIA_VISIBLE_DEVICES": slice_uuid})
    assert sampler.start()
    wait_for(lambda: sampler.taken >= 3, timeout=10, what="three readings")
    sampler.stop()
    summaries = [s.to_json() for s in sampler.summaries()]
    assert [(s["gpu"], s["energy_scope"]) for s in summaries] == [(1, "gpu")] and summaries[0]["energy_wh"] > 0
    document = build(payload(summaries), "A100-80GB-MIG-3g.40gb", instance_type="p4de.24xlarge")
    assert document["energy_wh"] is None and document["summary"][0]["energy_scope"] == "gpu"
    assert document["malformed"] == []
