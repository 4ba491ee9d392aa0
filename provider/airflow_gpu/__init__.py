"""GPU and accelerator workloads as first-class Airflow tasks.

The scheduler parses DAG files every few seconds, and every DAG that uses this provider
starts with ``import airflow_gpu``. So this module imports nothing: each public name is
resolved on first use (PEP 562), and only the module that defines it is loaded. Importing
an operator pulls in Airflow and its provider; importing ``Accelerator`` pulls in pydantic
and the catalog, nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY_NAMES: dict[str, str] = {
    "Accelerator": "airflow_gpu.accelerators.spec",
    "AcceleratorSpecError": "airflow_gpu.accelerators.errors",
    "LabelScheme": "airflow_gpu.accelerators.kubernetes",
    "Recommendation": "airflow_gpu.accelerators.recommend",
    "recommend": "airflow_gpu.accelerators.recommend",
}

__all__ = ["Accelerator", "AcceleratorSpecError", "LabelScheme", "Recommendation", "__version__", "recommend"]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from airflow_gpu.accelerators.errors import AcceleratorSpecError
    from airflow_gpu.accelerators.kubernetes import LabelScheme
    from airflow_gpu.accelerators.recommend import Recommendation, recommend
    from airflow_gpu.accelerators.spec import Accelerator


def __getattr__(name: str) -> Any:
    module_name = _LAZY_NAMES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'airflow_gpu' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_NAMES))
