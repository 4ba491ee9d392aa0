"""One reading of one GPU, named as dcgm-exporter names its metrics, and the series' downsampling.

A cluster that already scrapes dcgm-exporter into Prometheus reads the same quantities under the
same names (``DCGM_FI_DEV_GPU_UTIL`` is ``gpu_util`` here, ``DCGM_FI_DEV_FB_USED`` is ``fb_used``,
...). A metric the GPU does not support (NVML answers ``NotSupported`` per call; utilisation on
a MIG device, power on some boards) is None, never an error and never a zero.

A MIG slice has no power or energy reading of its own: NVML answers with the whole GPU's (its
energy counter is not supported on a MIG device handle), so a sample of a GPU the task holds a
slice of says so (``power_scope="gpu"``). ``owned_gpus`` says which GPUs are the task's at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from itertools import groupby
from typing import Any

#: The sample's field and the dcgm-exporter metric it matches, where dcgm-exporter has one.
DCGM_NAMES: dict[str, str] = {
    "gpu_util": "DCGM_FI_DEV_GPU_UTIL",
    "mem_copy_util": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "fb_used": "DCGM_FI_DEV_FB_USED",
    "power_usage": "DCGM_FI_DEV_POWER_USAGE",
    "total_energy_consumption": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "gpu_temp": "DCGM_FI_DEV_GPU_TEMP",
    "sm_clock": "DCGM_FI_DEV_SM_CLOCK",
}
#: The measured fields, averaged when samples are downsampled.
MEASURES = ("gpu_util", "mem_copy_util", "fb_used", "power_usage", "gpu_temp", "sm_clock")


@dataclass(frozen=True)
class Sample:
    """One GPU at one time (``time``: seconds since the epoch).

    ``gpu_util`` and ``mem_copy_util`` in %, ``fb_used`` and ``fb_total`` in MiB, ``power_usage``
    in W, ``total_energy_consumption`` in mJ since the driver loaded, ``gpu_temp`` in C,
    ``sm_clock`` in MHz. ``power_scope``: None when power and energy are the sampled device's own,
    ``"gpu"`` when they are the whole GPU's and the task holds only a MIG slice of it.
    """

    time: float
    gpu: int
    uuid: str
    name: str
    gpu_util: float | None = None
    mem_copy_util: float | None = None
    fb_used: float | None = None
    fb_total: float | None = None
    power_usage: float | None = None
    total_energy_consumption: float | None = None
    gpu_temp: float | None = None
    sm_clock: float | None = None
    power_scope: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Sample:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def downsample(samples: Sequence[Sample], points: int) -> list[Sample]:
    """At most ``points`` samples per GPU: consecutive samples averaged in equal buckets.

    The energy counter keeps each bucket's last reading (it is a counter, not a rate), and
    ``fb_used`` keeps the bucket's peak so that the chart never hides an out-of-memory spike.
    """
    if points < 1:
        raise ValueError(f"points must be at least 1, got {points}")
    result: list[Sample] = []
    ordered = sorted(samples, key=lambda s: (s.gpu, s.time))
    for _, group in groupby(ordered, key=lambda s: s.gpu):
        series = list(group)
        size = -(-len(series) // points)  # ceiling division: buckets of equal length
        for start in range(0, len(series), size):
            bucket = series[start : start + size]
            averaged: dict[str, Any] = {name: _mean(getattr(s, name) for s in bucket) for name in MEASURES}
            peaks = [s.fb_used for s in bucket if s.fb_used is not None]
            averaged["fb_used"] = max(peaks) if peaks else None
            result.append(replace(bucket[-1], time=_mean(s.time for s in bucket) or bucket[-1].time, **averaged))
    return result


# --- which of the GPUs a sampler sees are the task's -----------------------------------------

#: ``NVIDIA_VISIBLE_DEVICES`` values that select nothing here. ``void`` (and empty) is what the
#: container toolkit leaves alone, and what the device plugin sets when it hands devices over by
#: CDI, which the runtime has already limited the container to; an absolute path is the plugin's
#: ``volume-mounts`` list strategy, likewise.
NVIDIA_ALL = ("", "void", "all")


@dataclass(frozen=True)
class Owned:
    """The GPUs that are the task's, by the sampler's index, in index order.

    ``slices``: those of them the task holds a MIG slice of, not the whole GPU (their power and
    energy are the whole GPU's). ``everything``: every GPU the sampler sees (no ``--id`` needed).
    ``note``: why GPUs the environment names were not found, or why none is sampled.
    """

    indices: tuple[int, ...]
    slices: frozenset[int] = frozenset()
    everything: bool = True
    note: str | None = None


def _strtoul(text: str) -> int:
    """An entry of ``CUDA_VISIBLE_DEVICES`` as CUDA reads an index: leading digits (``1gpu`` is 1),
    -1 without any (as PyTorch's ``_parse_visible_devices`` mirrors it)."""
    end = 0
    while end < len(text) and (text[end].isdigit() or (end == 0 and text[end] in "+-")):
        end += 1
    try:
        return int(text[:end])
    except ValueError:
        return -1


def _by_uuid(entry: str, uuids: Sequence[str], mig_parent: Callable[[str], str | None]) -> tuple[int, bool] | None:
    """The GPU a UUID entry names (a unique prefix of a ``GPU-`` UUID, as CUDA accepts one), and
    whether it names a MIG slice of it (``MIG-<uuid>``, or the older ``MIG-GPU-<uuid>/<gi>/<ci>``)."""
    mig = entry.startswith("MIG-")
    if entry.startswith("MIG-GPU-"):
        entry = entry[len("MIG-") :].split("/", 1)[0]
    elif mig:
        parent = mig_parent(entry)
        if parent is None:
            return None
        entry = parent
    found = [i for i, uuid in enumerate(uuids) if uuid == entry] or [
        i for i, uuid in enumerate(uuids) if entry.startswith("GPU-") and uuid.startswith(entry)
    ]
    return (found[0], mig) if len(found) == 1 else None


def _nvidia_visible(
    value: str, uuids: Sequence[str], mig_parent: Callable[[str], str | None]
) -> tuple[set[int] | None, set[int], list[str]]:
    """``NVIDIA_VISIBLE_DEVICES`` (the container toolkit's): (chosen or None for all, slices, not found).

    Index entries (``2``, or ``2:1`` for MIG device 1 of GPU 2) count only where more GPUs are seen
    than the list names: inside a container the runtime has already hidden the others and numbered
    the rest from 0. UUIDs count everywhere.
    """
    value = value.strip()
    if value.lower() in NVIDIA_ALL or value.startswith("/"):
        return None, set(), []
    if value.lower() == "none":
        return set(), set(), []
    entries = [e.strip() for e in value.split(",") if e.strip()]
    by_index = len(uuids) > len(entries)
    chosen: set[int] = set()
    slices: set[int] = set()
    missing: list[str] = []
    for entry in entries:
        if entry[:1].isdigit():
            gpu, _, mig = entry.partition(":")
            if not by_index:
                return None, set(), []  # the runtime's own numbering: what is seen is what was given
            index = _strtoul(gpu)
            found = (index, bool(mig)) if 0 <= index < len(uuids) and gpu.isdigit() else None
        else:
            found = _by_uuid(entry, uuids, mig_parent)
        if found is None:
            missing.append(entry)
            continue
        chosen.add(found[0])
        if found[1]:
            slices.add(found[0])
    return chosen, slices, missing


def _cuda_visible(
    value: str, uuids: Sequence[str], mig_parent: Callable[[str], str | None]
) -> tuple[list[int], set[int]]:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it: indices or UUIDs (the first entry says which),
    read up to the first invalid one; a repeated one makes the list empty; empty is no GPU."""
    chosen: list[int] = []
    slices: set[int] = set()
    entries = [e.strip() for e in value.split(",")]
    prefix = entries[0][:4] if entries[0][:4] in ("GPU-", "MIG-") else None
    for entry in entries:
        if prefix is not None:
            found = _by_uuid(entry, uuids, mig_parent) if entry.startswith(prefix) else None
        else:
            index = _strtoul(entry)
            found = (index, False) if 0 <= index < len(uuids) else None
        if found is None:
            break
        if found[0] in chosen:
            return [], set()
        chosen.append(found[0])
        if found[1]:
            slices.add(found[0])
    return chosen, slices


def owned_gpus(
    env: Mapping[str, str], uuids: Sequence[str], mig_parent: Callable[[str], str | None] = lambda uuid: None
) -> Owned:
    """Which of the GPUs seen (``uuids``: the UUID of each, by the sampler's index) are the task's.

    ``NVIDIA_VISIBLE_DEVICES`` (all, none, void, UUIDs, indices) and ``CUDA_VISIBLE_DEVICES``
    (indices or UUIDs, as CUDA reads them) both narrow them; unset, neither does. CUDA's indices
    are taken as NVML's, which they are with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or GPUs of one model.
    ``mig_parent``: the UUID of the GPU a ``MIG-`` UUID is a slice of, or None.
    """
    every = set(range(len(uuids)))
    chosen, slices, notes = set(every), set(), []
    nvidia = env.get("NVIDIA_VISIBLE_DEVICES")
    if nvidia is not None:
        named, nvidia_slices, missing = _nvidia_visible(nvidia, uuids, mig_parent)
        if named is not None:
            chosen &= named
            slices |= nvidia_slices
        if missing:
            notes.append(f"NVIDIA_VISIBLE_DEVICES names {', '.join(missing)}, which this container does not see")
    cuda = env.get("CUDA_VISIBLE_DEVICES")
    if cuda is not None:
        listed, cuda_slices = _cuda_visible(cuda, uuids, mig_parent)
        chosen &= set(listed)
        slices |= cuda_slices
    if not chosen and uuids:
        shown = ", ".join(
            f"{name}={env[name]!r}" for name in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if name in env
        )
        notes.append(f"none of the {len(uuids)} GPU(s) seen is the task's ({shown})")
    indices = tuple(sorted(chosen))
    return Owned(indices, frozenset(slices & chosen), chosen == every, "; ".join(notes) or None)
