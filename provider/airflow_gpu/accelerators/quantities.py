"""CPU and memory amounts as users write them, checked at parse time.

Kubernetes takes quantities (``"64Gi"``, ``"500m"``), AWS Batch takes MiB and vCPUs, Metaflow
users write MiB as plain numbers. One parser accepts all of these so an operator can take
``memory=65536`` or ``memory="64Gi"`` and hand each backend the unit it wants.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from airflow_gpu.accelerators.errors import AcceleratorSpecError

MemoryAmount = int | str
CpuAmount = int | float | str

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^(?P<number>\d+(\.\d+)?|\.\d+)(?P<suffix>[KMGTPE]i|[kMGTPE]?)$")
_MEMORY_FORMS = ["MiB as a whole number (65536)", "a Kubernetes quantity ('64Gi', '512Mi', '1.5G')"]
_CPU_FORMS = ["cores as a number (8, 0.5)", "a Kubernetes quantity ('8', '500m')"]


def memory_bytes(value: MemoryAmount, field: str = "memory") -> int:
    """Bytes in a memory amount: an int is MiB, a string a Kubernetes quantity."""
    if isinstance(value, bool):
        raise AcceleratorSpecError(field, value, "not a memory amount", _MEMORY_FORMS)
    if isinstance(value, int):
        if value <= 0:
            raise AcceleratorSpecError(field, value, "must be positive", _MEMORY_FORMS)
        return value * 2**20
    if isinstance(value, str):
        match = _QUANTITY.match(value.strip())
        if match is not None:
            suffix = match["suffix"]
            scale = _BINARY.get(suffix) or _DECIMAL[suffix]
            amount = int(Decimal(match["number"]) * scale)
            if amount > 0:
                return amount
    raise AcceleratorSpecError(field, value, "not a memory amount", _MEMORY_FORMS)


def memory_mib(value: MemoryAmount, field: str = "memory") -> int:
    """A memory amount in whole MiB, rounded up: a request must never shrink."""
    return -(-memory_bytes(value, field) // 2**20)


def memory_quantity(value: MemoryAmount, field: str = "memory") -> str:
    """The Kubernetes quantity for a memory amount; a quantity string passes through, checked."""
    memory_bytes(value, field)
    return f"{value}Mi" if isinstance(value, int) else value.strip()


def cpu_cores(value: CpuAmount, field: str = "cpu") -> Decimal:
    """Cores in a CPU amount: a number of cores, or a quantity such as ``"500m"``."""
    if isinstance(value, bool):
        raise AcceleratorSpecError(field, value, "not a CPU amount", _CPU_FORMS)
    try:
        if isinstance(value, int | float):
            cores = Decimal(str(value))
        elif isinstance(value, str) and value.strip().endswith("m"):
            cores = Decimal(value.strip()[:-1]) / 1000
        elif isinstance(value, str):
            cores = Decimal(value.strip())
        else:
            raise AcceleratorSpecError(field, value, "not a CPU amount", _CPU_FORMS)
    except InvalidOperation:
        raise AcceleratorSpecError(field, value, "not a CPU amount", _CPU_FORMS) from None
    if not cores.is_finite() or cores <= 0:
        raise AcceleratorSpecError(field, value, "must be a positive number of cores", _CPU_FORMS)
    return cores


def cpu_quantity(value: CpuAmount, field: str = "cpu") -> str:
    """The Kubernetes quantity for a CPU amount, in millicores when not whole."""
    cores = cpu_cores(value, field)
    if cores == cores.to_integral_value():
        return str(int(cores))
    return f"{int((cores * 1000).to_integral_value(rounding='ROUND_CEILING'))}m"


_ANY_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(\d+(\.\d*)?|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
_SCALE = {
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50),
    "Ei": Decimal(2**60), "m": Decimal("0.001"), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
    "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18),
}  # fmt: skip


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity (``"500m"``, ``"64Gi"``, ``"1e3"``, ``8``) as a number."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"not a quantity: {value!r}")
    match = _ANY_QUANTITY.match(str(value).strip())
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = Decimal(match["number"]), match["suffix"] or ""
    if suffix[:1] in ("e", "E"):
        return number * (Decimal(10) ** int(suffix[1:]))
    return number * _SCALE.get(suffix, Decimal(1))
