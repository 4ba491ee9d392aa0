"""CUDA toolkit versions and the NVIDIA drivers that run them.

A container brings its CUDA toolkit; the node brings the driver. A toolkit newer than the driver
fails at the first CUDA call ("CUDA driver version is insufficient"), on the GPU node, long after
the DAG was parsed. These tables let the provider refuse that pairing up front.
"""

from __future__ import annotations

import re
from typing import Literal

Version = tuple[int, ...]
Compatibility = Literal["strict", "minor-version"]
COMPATIBILITY_MODES: tuple[str, ...] = ("strict", "minor-version")

#: Minimum Linux driver of each toolkit (CUDA release notes, "CUDA Toolkit and Corresponding
#: Driver Versions").
CUDA_MIN_DRIVER: dict[tuple[int, int], Version] = {
    (11, 8): (520, 61, 5),
    (12, 0): (525, 60, 13),
    (12, 1): (530, 30, 2),
    (12, 2): (535, 54, 3),
    (12, 3): (545, 23, 6),
    (12, 4): (550, 54, 14),
    (12, 5): (555, 42, 2),
    (12, 6): (560, 28, 3),
    (12, 8): (570, 26),
    (12, 9): (575, 51, 3),
    (13, 0): (580, 65, 6),
}

#: CUDA minor-version compatibility: any 12.x runs on a driver >= 525.60.13 and any 13.x on
#: >= 580 (without PTX JIT of newer code, and with the limits NVIDIA lists), so it is opt-in.
MINOR_VERSION_MIN_DRIVER: dict[int, Version] = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}

_VERSION = re.compile(r"^\d+(\.\d+)*$")


def parse_version(text: str | int | float) -> Version:
    """``"12.8"`` -> (12, 8); ``"535.104.05"`` -> (535, 104, 5)."""
    value = str(text).strip()
    if not _VERSION.match(value):
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(part) for part in value.split("."))


def show(version: Version) -> str:
    return ".".join(str(part) for part in version)


def _at_least(driver: Version, minimum: Version) -> bool:
    """A driver given as a branch (``"535"``) means that branch's releases, all of which qualify."""
    return driver >= minimum[: len(driver)]


def max_cuda_for_driver(driver: Version) -> tuple[int, int] | None:
    """The newest toolkit a driver supports without compatibility packages, or None."""
    supported = [cuda for cuda, minimum in CUDA_MIN_DRIVER.items() if _at_least(driver, minimum)]
    return max(supported) if supported else None


def driver_runs(cuda: Version, driver: Version, compatibility: Compatibility = "strict") -> bool:
    """Whether a node with ``driver`` runs a toolkit ``cuda`` (major.minor)."""
    major_minor = (cuda[0], cuda[1] if len(cuda) > 1 else 0)
    if compatibility == "minor-version":
        minimum = MINOR_VERSION_MIN_DRIVER.get(major_minor[0])
        return minimum is not None and _at_least(driver, minimum)
    newest = max_cuda_for_driver(driver)
    return newest is not None and major_minor <= newest


def min_driver(cuda: Version, compatibility: Compatibility = "strict") -> Version | None:
    """The oldest driver that runs toolkit ``cuda`` (major.minor), or None when the table lacks it."""
    if compatibility == "minor-version":
        return MINOR_VERSION_MIN_DRIVER.get(cuda[0])
    return CUDA_MIN_DRIVER.get((cuda[0], cuda[1] if len(cuda) > 1 else 0))


def driver_limit_text(driver: Version, compatibility: Compatibility = "strict", label: str | None = None) -> str:
    """``"driver 535 supports CUDA <= 12.2"``; ``label`` is the driver as the user wrote it."""
    name = label or show(driver)
    if compatibility == "minor-version":
        majors = [str(m) for m, minimum in MINOR_VERSION_MIN_DRIVER.items() if _at_least(driver, minimum)]
        return f"driver {name} runs CUDA {' and '.join(m + '.x' for m in majors) or 'none'}"
    newest = max_cuda_for_driver(driver)
    limit = f"CUDA <= {show(newest)}" if newest else "no CUDA 11.8 or newer"
    return f"driver {name} supports {limit}"
