"""List prices of the catalog's EC2 instance types, and what a task's GPU time cost at them.

The figures live in ``prices.json`` beside this module, as dated data: every price carries the day
it was true and the address it was read from, and the report page shows both, because a price
table without a date is a guess. Region us-east-1, Linux, shared tenancy, USD per instance-hour.

On-demand figures are AWS list prices (they change rarely and by announcement, e.g. the June 2025
P4/P5 cut), read from Karpenter's generated copy of the AWS price list. Spot figures are a snapshot
of a moving market, read from a third-party copy of the instances.vantage.sh data (the data file's
notes say which): the cost of a spot task is an estimate at that day's average price, never a
bill. An instance type without a figure is left out of the data, never filled in; a task on it
gets no cost and a note saying why.

Cost is the GPU share of the instance's hourly price times the GPU-hours measured: a task that held
2 of the 8 GPUs of a node pays a quarter of the node, which is how a shared Kubernetes node's bill
divides; a task that held the whole instance pays all of it. The GPU-hours are the profile's
sampled span, so the image pull, start-up and teardown the instance was also paid for are not in
it; the basis sentence says so, and names the region whose prices it used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

Capacity = Literal["on-demand", "spot"]
CAPACITIES: tuple[Capacity, ...] = ("on-demand", "spot")
DATA_FILE = "prices.json"
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Price:
    """One figure: what one hour of ``instance_type`` cost with ``capacity`` on ``date``."""

    instance_type: str
    capacity: Capacity
    usd_per_hour: float
    date: str  # ISO day the figure was true
    source: str  # where it was read


@dataclass(frozen=True)
class PriceTable:
    """Every figure of the data file, with the terms they share (region, operating system, notes)."""

    region: str
    operating_system: str
    notes: Mapping[str, str]
    prices: Mapping[tuple[str, Capacity], Price]

    def price(self, instance_type: str, capacity: Capacity) -> Price | None:
        return self.prices.get((instance_type, capacity))

    def instance_types(self) -> tuple[str, ...]:
        return tuple(sorted({name for name, _ in self.prices}))


def _problem(where: str, what: str) -> ValueError:
    return ValueError(f"{DATA_FILE}: {where}: {what}")


def _price(name: str, capacity: Capacity, entry: Any) -> Price:
    where = f"{name} {capacity}"
    if not isinstance(entry, Mapping):
        raise _problem(where, "not an object")
    usd, date, source = entry.get("usd_per_hour"), entry.get("date"), entry.get("source")
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not usd > 0:
        raise _problem(where, f"usd_per_hour must be a positive number, got {usd!r}")
    if not isinstance(date, str) or not _DATE.match(date):
        raise _problem(where, f"date must be YYYY-MM-DD, got {date!r}")
    if not isinstance(source, str) or not source.startswith("https://"):
        raise _problem(where, f"source must be an https address, got {source!r}")
    return Price(name, capacity, float(usd), date, source)


def parse(data: Mapping[str, Any]) -> PriceTable:
    """The table in the data file's JSON; ValueError naming the entry when one is malformed."""
    types = data.get("instance_types")
    if not isinstance(types, Mapping):
        raise _problem("instance_types", "missing")
    prices: dict[tuple[str, Capacity], Price] = {}
    for name, entry in types.items():
        if not isinstance(entry, Mapping) or "on-demand" not in entry:
            raise _problem(name, "every instance type needs an on-demand price")
        unknown = set(entry) - set(CAPACITIES)
        if unknown:
            raise _problem(name, f"unknown capacity {sorted(unknown)}; expected {list(CAPACITIES)}")
        for capacity in CAPACITIES:
            if capacity in entry:
                prices[(name, capacity)] = _price(name, capacity, entry[capacity])
    notes = data.get("notes") or {}
    return PriceTable(
        region=str(data.get("region", "")),
        operating_system=str(data.get("operating_system", "")),
        notes={str(k): str(v) for k, v in notes.items()},
        prices=prices,
    )


@cache
def load() -> PriceTable:
    """The table shipped with the package (read once per process)."""
    text = resources.files("airflow_gpu.profiling").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return parse(json.loads(text))


@dataclass(frozen=True)
class Cost:
    """What a task's GPU time cost, and the sentence that says how it was worked out."""

    usd: float
    instance_type: str
    capacity: Capacity
    usd_per_hour: float  # the whole instance's
    basis: str
    prices_date: str
    source: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _hours(value: float) -> str:
    return f"{value:.2f} h" if value >= 0.005 else f"{value * 3600:.0f} s"


#: What the basis says the cost leaves out: the profile samples the wrapped command only.
SAMPLED_ONLY = "the sampled GPU time only: image pull, start-up and teardown are not in it"


def gpu_cost(
    price: Price,
    *,
    region: str,
    instance_gpus: int,
    gpus: float,
    gpu_hours: float,
    held: str | None = None,
    estimated: str | None = None,
) -> Cost:
    """The cost of ``gpu_hours`` of GPU time at ``price``, each GPU-hour paying 1/``instance_gpus``.

    ``gpus`` is how many of the instance's GPUs the task held (a fraction for MIG slices) and only
    serves the basis sentence (``held`` replaces its "N of M GPUs" wording); ``region`` is the price
    data's, named in the basis because a task elsewhere paid that region's price; ``estimated`` says
    why the instance type is a guess, when it is one.
    """
    if instance_gpus < 1:
        raise ValueError(f"instance_gpus must be at least 1, got {instance_gpus}")
    usd = price.usd_per_hour / instance_gpus * gpu_hours
    hours = gpu_hours / gpus if gpus > 0 else 0.0
    what = held or f"{gpus:g} of {instance_gpus} GPUs"
    where = f"{region} " if region else ""
    basis = f"{what} of {price.instance_type} for {_hours(hours)} at the {where}{price.capacity} price of {price.date}"
    if price.capacity == "spot":
        basis += " (spot: that day's average price, a snapshot)"
    basis += f"; {SAMPLED_ONLY}"
    if estimated:
        basis += f"; {estimated}"
    return Cost(
        usd=round(usd, 4),
        instance_type=price.instance_type,
        capacity=price.capacity,
        usd_per_hour=price.usd_per_hour,
        basis=basis,
        prices_date=price.date,
        source=price.source,
    )
