"""The price data shipped beside the catalog, and the cost arithmetic, against hand-worked figures."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.accelerators import catalog
from airflow_gpu.profiling import prices

#: Instance types of the catalog that the data leaves out on purpose: AWS sells neither on demand in
#: us-east-1 (p5e: Capacity Blocks only; trn2: other regions and Capacity Blocks), so the AWS price
#: list the on-demand figures come from has no figure for them, and none is made up.
UNPRICED = {"p5e.48xlarge", "trn2.48xlarge"}


def _catalog_instances() -> dict[str, catalog.InstanceType]:
    return {i.name: i for entry in catalog.CATALOG for i in entry.instance_types}


def test_the_data_file_ships_inside_the_package() -> None:
    # The wheel is built from provider/airflow_gpu (hatch includes every file that git does not
    # ignore), so a file beside the module is package data; this is also how load() reads it.
    assert resources.files("airflow_gpu.profiling").joinpath(prices.DATA_FILE).is_file()


def test_every_price_has_a_date_and_a_source() -> None:
    table = prices.load()
    assert table.region == "us-east-1" and table.operating_system == "Linux"
    assert table.prices, "the data holds no price"
    for price in table.prices.values():
        assert price.usd_per_hour > 0
        assert len(price.date) == 10 and price.date[4] == "-" and price.date[7] == "-"
        assert price.source.startswith("https://")
    assert "snapshot" in table.notes["spot"]  # the page says spot figures are a dated snapshot


def _repository(source: str) -> str:
    """``https://github.com/owner/name`` of a GitHub file address (the address itself otherwise)."""
    parts = source.split("/")
    return "/".join(parts[:5]) if source.startswith("https://github.com/") else source


@pytest.mark.parametrize("capacity", prices.CAPACITIES)
def test_the_notes_name_the_repository_every_figure_was_read_from(capacity: prices.Capacity) -> None:
    # The page shows each figure's source and the note beside it: they must tell the same story.
    table = prices.load()
    sources = {p.source for p in table.prices.values() if p.capacity == capacity}
    assert sources
    for source in sources:
        assert _repository(source) in table.notes[capacity], source


def test_the_spot_note_says_its_figures_are_a_copy_of_the_instances_vantage_data() -> None:
    table = prices.load()
    note = table.notes["spot"]
    [source] = {p.source for p in table.prices.values() if p.capacity == "spot"}
    # The figures were read from a third-party repository's copy, not from instances.vantage.sh: the
    # note names both, and the source is the copy (the address actually read).
    assert "instances.vantage.sh" in note and "copy" in note and "not read from instances.vantage.sh" in note
    assert source.startswith("https://github.com/tsaol/aws-gpu/blob/") and "instances.vantage.sh" not in source
    dates = {p.date for p in table.prices.values() if p.capacity == "spot"}
    assert dates == {"2025-11-30"} and "2025-11-30" in note


def test_every_priced_instance_type_is_in_the_catalog_and_the_rest_are_named() -> None:
    table = prices.load()
    known = _catalog_instances()
    assert set(table.instance_types()) <= set(known)
    assert set(known) - set(table.instance_types()) == UNPRICED


def test_spot_is_cheaper_than_on_demand() -> None:
    table = prices.load()
    both = [n for n in table.instance_types() if table.price(n, "spot") is not None]
    assert len(both) >= 10
    for name in both:
        spot, on_demand = table.price(name, "spot"), table.price(name, "on-demand")
        assert spot is not None and on_demand is not None
        assert spot.usd_per_hour < on_demand.usd_per_hour, name


def test_known_list_prices() -> None:
    # Figures read off the AWS price list (through Karpenter's generated table of 2026-02-09); the
    # P4 and P5 ones are after AWS's June 2025 price cut (p5.48xlarge was $98.32/h before it).
    table = prices.load()
    expected = {"g5.xlarge": 1.006, "g5.12xlarge": 5.672, "p4d.24xlarge": 21.957642, "p5.48xlarge": 55.04}
    for name, usd in expected.items():
        price = table.price(name, "on-demand")
        assert price is not None and price.usd_per_hour == usd and price.date == "2026-02-09"


def _entry(**price: Any) -> dict[str, Any]:
    good = {"usd_per_hour": 1.0, "date": "2026-01-01", "source": "https://example.com/prices"}
    return {"instance_types": {"g5.xlarge": {"on-demand": {**good, **price}}}}


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (_entry(date=None), "date must be YYYY-MM-DD"),
        (_entry(date="Feb 2026"), "date must be YYYY-MM-DD"),
        (_entry(source="http://example.com"), "source must be an https address"),
        (_entry(usd_per_hour=0), "positive number"),
        (_entry(usd_per_hour=True), "positive number"),
        (
            {"instance_types": {"g5.xlarge": {"spot": _entry()["instance_types"]["g5.xlarge"]["on-demand"]}}},
            "on-demand",
        ),
        ({"instance_types": {"g5.xlarge": {"on-demand": {}, "reserved": {}}}}, "unknown capacity"),
        ({}, "instance_types"),
    ],
)
def test_malformed_data_is_refused_naming_the_entry(data: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        prices.parse(data)


def test_the_shipped_file_parses_the_same_as_load() -> None:
    text = resources.files("airflow_gpu.profiling").joinpath(prices.DATA_FILE).read_text(encoding="utf-8")
    assert prices.parse(json.loads(text)) == prices.load()


G5_12 = prices.Price("g5.12xlarge", "on-demand", 5.672, "2026-02-09", "https://example.com/a")


def test_whole_instance_costs_its_hourly_price_times_the_hours() -> None:
    cost = prices.gpu_cost(G5_12, region="us-east-1", instance_gpus=4, gpus=4, gpu_hours=0.4)
    assert cost.usd == pytest.approx(0.5672)  # 4 GPUs x 0.1 h = 0.1 h of the whole instance
    assert cost.basis == (
        "4 of 4 GPUs of g5.12xlarge for 0.10 h at the us-east-1 on-demand price of 2026-02-09; the sampled GPU time "
        "only: image pull, start-up and teardown are not in it"
    )
    assert (cost.prices_date, cost.source, cost.usd_per_hour) == ("2026-02-09", "https://example.com/a", 5.672)


def test_fewer_gpus_than_the_instance_pay_their_share() -> None:
    p4d = prices.Price("p4d.24xlarge", "spot", 8.0, "2025-11-30", "https://example.com/b")
    cost = prices.gpu_cost(p4d, region="us-east-1", instance_gpus=8, gpus=2, gpu_hours=3.0, estimated="a guess")
    assert cost.usd == pytest.approx(3.0)  # $1 per GPU-hour
    assert "2 of 8 GPUs of p4d.24xlarge for 1.50 h at the us-east-1 spot price of 2025-11-30" in cost.basis
    assert "snapshot" in cost.basis and prices.SAMPLED_ONLY in cost.basis and cost.basis.endswith("; a guess")
    with pytest.raises(ValueError, match="instance_gpus"):
        prices.gpu_cost(p4d, region="us-east-1", instance_gpus=0, gpus=1, gpu_hours=1.0)


@given(
    usd=st.floats(min_value=0.01, max_value=200),
    instance_gpus=st.integers(min_value=1, max_value=16),
    data=st.data(),
    hours=st.floats(min_value=0, max_value=100),
)
def test_cost_is_the_per_gpu_share_times_gpu_hours(usd: float, instance_gpus: int, data: Any, hours: float) -> None:
    gpus = data.draw(st.integers(min_value=1, max_value=instance_gpus))
    price = prices.Price("g5.48xlarge", "on-demand", usd, "2026-02-09", "https://example.com/c")
    cost = prices.gpu_cost(price, region="us-east-1", instance_gpus=instance_gpus, gpus=gpus, gpu_hours=gpus * hours)
    assert cost.usd == pytest.approx(round(usd * gpus / instance_gpus * hours, 4), abs=1e-9)
    assert cost.usd <= round(usd * hours, 4) + 1e-9  # never more than the whole instance
    assert json.loads(json.dumps(cost.to_json())) == cost.to_json()
