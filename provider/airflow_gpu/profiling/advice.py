"""Advice a user can act on, read from a task's per-GPU summary and the accelerator catalog.

Each rule speaks only when the data supports it: no samples, no advice; a metric the GPU did not
report (None) gives no advice about that metric. The rules and why each threshold sits where it
does are below; every message names the numbers it rests on, so a user can judge it.

- ``smaller-gpu``: the peak memory fits a smaller GPU of the catalog that does every precision this
  one does (name them), and the GPU was lightly used (``SMALLER_GPU_MAX_UTIL_P95``): the smaller
  GPUs have a fraction of the compute, so a busy job would run several times longer on them. The
  message says the GPU-bound steps run slower; without a utilisation reading it says the advice
  rests on memory alone.
- ``mig``: a single-GPU task whose peak memory and p95 utilisation fit a MIG slice of this GPU (name
  the smallest such profile).
- ``multi-gpu-unused``: some GPUs worked while the others sat idle (ask for fewer GPUs, or check
  that DDP starts one process per GPU).
- ``idle``: the GPUs that worked were idle most of the time (the input pipeline starves them).
- ``memory-near-limit``: the peak came close to the GPU's memory. The driver counts what a
  framework reserved, not what it used, and some reserve a fixed share up front (TensorFlow nearly
  all of it, JAX 75%, vLLM its ``gpu_memory_utilization``, 0.9), so the message says first how to
  tell (the framework's own peak, or preallocation turned off), then the cure if the need is real
  (a bigger variant, or gradient checkpointing / a smaller batch). A peak near the limit suppresses
  ``smaller-gpu`` and ``mig``, which would otherwise be fooled by a reserved pool too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_gpu.accelerators import catalog
from airflow_gpu.accelerators.catalog import AcceleratorType, MigProfile, Variant
from airflow_gpu.accelerators.errors import AcceleratorSpecError
from airflow_gpu.accelerators.spec import Accelerator
from airflow_gpu.profiling.payload import finite_number

Kind = Literal["smaller-gpu", "mig", "idle", "multi-gpu-unused", "memory-near-limit"]

#: Fewer samples than this (per GPU) give no advice: at 1 Hz it is a few seconds, which start-up
#: (loading the model, compiling kernels) dominates, so the figures say nothing about the work.
MIN_SAMPLES = 10

#: A smaller GPU or a MIG slice must hold the peak times this: PyTorch's caching allocator rounds
#: blocks up and fragments, the peak between two samples is not seen, and a slightly longer
#: sequence or batch must not tip the job into out-of-memory on the smaller device.
MEMORY_HEADROOM = 1.25

#: Peak over total above this is "near the limit": past 90% the allocator starts retrying and
#: splitting, and one larger input runs out of memory.
MEMORY_NEAR_LIMIT = 0.90

#: ``smaller-gpu`` speaks only when the p95 utilisation (the share of time a kernel ran) is below
#: this. The smaller GPUs of the catalog have roughly a half to an eighth of the dense tensor
#: throughput of the ones they would replace (an L4 about 40% of an A100, an eighth of an H100), so
#: each kernel runs 2-8 times longer: a busy H100 job runs 5-10 times as long on an L4, and no
#: memory saving is worth that. A job busy a share u of the time takes at most (1 - u) + u * k times
#: as long on a GPU k times slower: at u = 25% that is 1.25-2.75 times, while the smaller GPU's
#: hourly price is roughly 3-8 times lower (g6.xlarge against a p5.4xlarge H100, g5.xlarge against an
#: eighth of a p4d.24xlarge), so below this the job costs less even though it runs longer. The
#: message says it runs longer.
SMALLER_GPU_MAX_UTIL_P95 = 25.0

#: Idle (at or below summary.IDLE_UTIL) more than this fraction of the samples is "idle most of
#: the time": the GPU waited for data or the CPU for longer than it computed.
IDLE_MOST_OF_THE_TIME = 0.5

#: A GPU idle at least this fraction of the samples while another worked was not used at all: a
#: used GPU in data-parallel training is idle only between steps, far less than 90% of the time.
UNUSED_IDLE_FRACTION = 0.9

#: Catalog memory is in GB (10^9 bytes, as vendors label cards); the samples are in MiB.
_GIB_PER_GB = 1e9 / 2**30
_MIB_PER_GIB = 1024.0


@dataclass(frozen=True)
class Advice:
    kind: Kind
    message: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "detail": dict(self.detail)}


def _number(summary: Mapping[str, Any], name: str) -> float | None:
    """The field as a finite float, else None."""
    return finite_number(summary.get(name))


def _gpu(summary: Mapping[str, Any]) -> int:
    """The summary's GPU index (0 when it has none: ``report`` drops such summaries before advice)."""
    value = summary.get("gpu")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _gib(mib: float) -> float:
    return mib / _MIB_PER_GIB


def _usable_gib(memory_gb: int) -> float:
    return memory_gb * _GIB_PER_GB


def _with_samples(summaries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [s for s in summaries if (_number(s, "samples") or 0) >= MIN_SAMPLES]


def _label(entry: AcceleratorType, memory_gb: int) -> str:
    return entry.name if len(entry.memory_variants) == 1 else f"{entry.name}-{memory_gb}GB"


def _or(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _spec(accelerator: Accelerator, **changes: Any) -> str | None:
    """The shorthand of ``accelerator`` with ``changes``, or None when the catalog refuses them."""
    fields = {"type": accelerator.type, "count": accelerator.count, "memory_gb": accelerator.memory_gb,
              "form_factor": accelerator.form_factor, "mig": accelerator.mig, **changes}  # fmt: skip
    try:
        return str(Accelerator(**fields))
    except AcceleratorSpecError:
        return None


def _device_memory_gb(accelerator: Accelerator, total_mib: float | None) -> int:
    """The memory of the GPU the task ran on: the variant nearest what the GPU reported, if it did; a MIG
    slice's is its profile's (NVML reports the slice's inside it, and the slice is all the task has)."""
    if accelerator.mig_profile is not None:
        return accelerator.mig_profile.memory_gb
    sizes = sorted({v.memory_gb for v in accelerator.variants}) or [accelerator.device_memory_gb]
    if total_mib is None:
        return sizes[0]
    return min(sizes, key=lambda gb: abs(_usable_gib(gb) - _gib(total_mib)))


def _peak(summaries: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], float] | None:
    readings = [(s, peak) for s in summaries if (peak := _number(s, "fb_peak")) is not None]
    return max(readings, key=lambda r: r[1]) if readings else None


def _smaller_gpus(accelerator: Accelerator, memory_gb: int, need_gib: float) -> tuple[int, list[str]] | None:
    """The catalog GPUs with the least memory that still holds ``need_gib``, all below ``memory_gb``."""
    current = accelerator.catalog_entry
    fitting: list[tuple[int, str]] = []
    for entry in catalog.CATALOG:
        if entry.kind != "gpu" or entry.vendor != current.vendor or entry.name == current.name:
            continue
        if not current.precisions <= entry.precisions:
            continue  # the job may use a precision (bf16, fp8) the other GPU cannot run
        for gb in entry.memory_variants:
            if gb < memory_gb and _usable_gib(gb) >= need_gib:
                fitting.append((gb, _label(entry, gb)))
                break
    if not fitting:
        return None
    least = min(gb for gb, _ in fitting)
    return least, sorted(dict.fromkeys(name for gb, name in fitting if gb == least))


def _mig_variant(accelerator: Accelerator, memory_gb: int) -> Variant | None:
    return next((v for v in accelerator.variants if v.memory_gb == memory_gb and v.mig_profiles), None)


def _mig_profile(variant: Variant, need_gib: float, util_p95: float | None) -> MigProfile | None:
    """The smallest MIG profile short of the whole GPU that holds the memory and, if known, the p95 load."""
    for profile in sorted(variant.mig_profiles, key=lambda p: (p.memory_gb, p.compute_slices)):
        if profile.compute_slices >= 7 or _usable_gib(profile.memory_gb) < need_gib:
            continue
        if util_p95 is not None and profile.compute_slices / 7 * 100 < util_p95:
            continue
        return profile
    return None


def _busiest_p95(summaries: Sequence[Mapping[str, Any]]) -> tuple[float | None, bool]:
    """The highest p95 utilisation of the GPUs that reported one, and whether all of them did."""
    readings = [_number(s, "util_p95") for s in summaries]
    known = [r for r in readings if r is not None]
    return (max(known) if known else None), len(known) == len(readings)


def _memory_fits(accelerator: Accelerator, summaries: Sequence[Mapping[str, Any]]) -> list[Advice]:
    found = _peak(summaries)
    if found is None:
        return []
    summary, peak_mib = found
    total_mib = _number(summary, "fb_total")
    memory_gb = _device_memory_gb(accelerator, total_mib)
    total_gib = _gib(total_mib) if total_mib else _usable_gib(memory_gb)
    need_gib = _gib(peak_mib) * MEMORY_HEADROOM
    per_gpu = " per GPU" if len(summaries) > 1 else ""
    where = f"peak {_gib(peak_mib):.1f} GiB{per_gpu} of {total_gib:.1f} GiB"
    advice: list[Advice] = []
    busiest, all_reported = _busiest_p95(summaries)
    lightly_used = busiest is None or busiest < SMALLER_GPU_MAX_UTIL_P95
    smaller = None if accelerator.mig or not lightly_used else _smaller_gpus(accelerator, memory_gb, need_gib)
    if smaller is not None:
        gb, names = smaller
        hold = f"{_or(names)} ({gb} GB) would hold it with {MEMORY_HEADROOM - 1:.0%} to spare"
        it_has, on_it = ("they have", "on them") if len(names) > 1 else ("it has", "on it")
        if all_reported and busiest is not None:
            most = " at most" if len(summaries) > 1 else ""
            message = (
                f"{where} and p95 utilisation{most} {busiest:.0f}%: {hold}; {it_has} a fraction of this GPU's compute, "
                "so the GPU-bound steps run slower and the job takes longer."
            )
        else:
            message = (
                f"{where}: {hold}, judged on memory alone: utilisation was not reported, and {it_has} a fraction of "
                f"this GPU's compute, so check the job is not compute-bound (a busy job runs several times longer "
                f"{on_it})."
            )
        detail = {"peak_gib": round(_gib(peak_mib), 2), "total_gib": round(total_gib, 2), "gpus": names,
                  "memory_gb": gb, "util_p95": busiest if all_reported else None,
                  "max_util_p95": SMALLER_GPU_MAX_UTIL_P95, "memory_only": not all_reported}  # fmt: skip
        advice.append(Advice("smaller-gpu", message, detail))
    variant = _mig_variant(accelerator, memory_gb)
    if variant is not None and not accelerator.mig and len(summaries) == 1:
        util_p95 = _number(summary, "util_p95")
        profile = _mig_profile(variant, need_gib, util_p95)
        if profile is not None:
            load = f" and p95 utilisation {util_p95:.0f}%" if util_p95 is not None else ""
            check = (
                "" if util_p95 is not None else " (utilisation was not reported: check the job needs no more compute)"
            )
            spec = _spec(accelerator, count=1, memory_gb=memory_gb, mig=profile.name)
            ask = f"; ask for '{spec}'" if spec else ""
            advice.append(
                Advice(
                    "mig",
                    f"{where}{load}: a MIG {profile.name} slice ({profile.compute_slices}/7 of the GPU) would do"
                    f"{ask}{check}.",
                    {
                        "peak_gib": round(_gib(peak_mib), 2),
                        "profile": profile.name,
                        "compute_slices": profile.compute_slices,
                        "util_p95": util_p95,
                    },
                )
            )
    return advice


def _unused(accelerator: Accelerator, summaries: Sequence[Mapping[str, Any]]) -> tuple[list[Advice], set[int]]:
    """GPUs idle nearly all the time while another worked; their indices, to leave out of ``idle``."""
    readings = [(s, idle) for s in summaries if (idle := _number(s, "idle_fraction")) is not None]
    if len(readings) < 2:
        return [], set()
    unused = [s for s, idle in readings if idle >= UNUSED_IDLE_FRACTION]
    used = [s for s, idle in readings if idle < UNUSED_IDLE_FRACTION]
    if not unused or not used:
        return [], set()
    used_ids = [_gpu(s) for s in used]
    unused_ids = [_gpu(s) for s in unused]
    least_idle = min(idle for _, idle in readings if idle >= UNUSED_IDLE_FRACTION)
    fewer = None if accelerator.mig else _spec(accelerator, count=len(used))
    ask = f"ask for {len(used)} ('{fewer}')" if fewer else "ask for fewer"
    worked = f"GPU{'s' if len(used) > 1 else ''} {', '.join(map(str, used_ids))}"
    sat = f"GPU{'s' if len(unused) > 1 else ''} {', '.join(map(str, unused_ids))}"
    message = (
        f"{worked} worked while {sat} sat idle at least {least_idle:.0%} of the time: the job used "
        f"{len(used)} of {len(readings)} GPUs; {ask}, or check that DDP (torchrun --nproc-per-node) starts "
        "one process per GPU."
    )
    detail = {"used": used_ids, "unused": unused_ids, "least_idle_fraction": round(least_idle, 3)}
    return [Advice("multi-gpu-unused", message, detail)], set(unused_ids)


def _idle(summaries: Sequence[Mapping[str, Any]], skip: set[int]) -> list[Advice]:
    readings = [
        (s, idle) for s in summaries if _gpu(s) not in skip and (idle := _number(s, "idle_fraction")) is not None
    ]
    if not readings:
        return []
    mean = sum(idle for _, idle in readings) / len(readings)
    if mean <= IDLE_MOST_OF_THE_TIME:
        return []
    gpus = "The GPU was" if len(readings) == 1 else "The GPUs were"
    message = (
        f"{gpus} idle {mean:.0%} of the time: the work is waiting on something else "
        "(data loading, CPU preprocessing, I/O); raise DataLoader num_workers and prefetching, or move "
        "the CPU-bound steps into a task of their own without a GPU."
    )
    return [Advice("idle", message, {"idle_fraction": round(mean, 3), "gpus": [_gpu(s) for s, _ in readings]})]


def _bigger(accelerator: Accelerator, memory_gb: int) -> list[str]:
    """Larger variants of this type, else the next larger GPUs of the vendor that run its precisions; for a
    MIG slice, the next larger profiles of the same GPU."""
    if accelerator.mig_profile is not None:
        return _bigger_slices(accelerator, memory_gb)
    entry = accelerator.catalog_entry
    same = [f"{entry.name}-{gb}GB" for gb in entry.memory_variants if gb > memory_gb]
    if same:
        return same[:2]
    larger: list[tuple[int, str]] = []
    for other in catalog.CATALOG:
        sizes = [gb for gb in other.memory_variants if gb > memory_gb]
        if other.kind == "gpu" and other.vendor == entry.vendor and entry.precisions <= other.precisions and sizes:
            larger.append((sizes[0], _label(other, sizes[0])))
    return [name for _, name in sorted(larger)[:2]]


def _bigger_slices(accelerator: Accelerator, memory_gb: int) -> list[str]:
    """The two smallest MIG profiles of the slice's GPU with more memory than ``memory_gb``, as specs the
    parser accepts (as many slices as asked where they fit on one GPU)."""
    variant = accelerator.variants[0]
    profiles = sorted((p for p in variant.mig_profiles if p.memory_gb > memory_gb),
                      key=lambda p: (p.memory_gb, p.compute_slices))  # fmt: skip
    specs = (_spec(accelerator, memory_gb=variant.memory_gb, mig=p.name) for p in profiles)
    return [spec for spec in specs if spec][:2]


#: How to tell a reserved pool from a real need, per framework that reserves one (named in the message).
PREALLOCATION_CHECKS = (
    "torch.cuda.max_memory_allocated(), tf.config.experimental.get_memory_info('GPU:0')['peak'] or "
    "jax.devices()[0].memory_stats()['peak_bytes_in_use']"
)


def _near_limit(accelerator: Accelerator, summaries: Sequence[Mapping[str, Any]]) -> list[Advice]:
    worst: tuple[float, Mapping[str, Any], float, float] | None = None
    for s in summaries:
        peak, total = _number(s, "fb_peak"), _number(s, "fb_total")
        if peak is None or not total or not math.isfinite(peak / total):
            continue
        if worst is None or peak / total > worst[0]:
            worst = (peak / total, s, peak, total)
    if worst is None or worst[0] <= MEMORY_NEAR_LIMIT:
        return []
    share, summary, peak, total = worst
    bigger = _bigger(accelerator, _device_memory_gb(accelerator, total))
    larger = f"ask for {_or(bigger)}, or " if bigger else ""
    message = (
        f"GPU {_gpu(summary)} peaked at {_gib(peak):.1f} of {_gib(total):.1f} GiB ({share:.0%}), which may be memory "
        "reserved rather than used: the driver counts what a framework holds, and some take a fixed share up front "
        "(TensorFlow nearly all of it, JAX 75%, vLLM its gpu_memory_utilization, 0.9, which it fills with KV cache "
        "by design; PyTorch's allocator also keeps freed blocks). Check the framework's own peak "
        f"({PREALLOCATION_CHECKS}), or rerun with preallocation off (TF_FORCE_GPU_ALLOW_GROWTH=true, "
        "XLA_PYTHON_CLIENT_PREALLOCATE=false). If the job really needs it, one larger batch or sequence runs out of "
        f"memory: {larger}use gradient checkpointing or a smaller batch."
    )
    detail = {"gpu": _gpu(summary), "peak_gib": round(_gib(peak), 2), "total_gib": round(_gib(total), 2),
              "share": round(share, 3), "bigger": bigger, "may_be_preallocated": True}  # fmt: skip
    return [Advice("memory-near-limit", message, detail)]


def advise(summaries: Sequence[Mapping[str, Any]], accelerator: Accelerator | str) -> list[Advice]:
    """The advice the summaries (``GpuSummary.to_json()`` dicts) support, for a task on ``accelerator``."""
    accelerator = Accelerator.parse(accelerator)
    measured = _with_samples(summaries)
    if not measured or accelerator.catalog_entry.kind != "gpu":
        return []
    unused, skip = _unused(accelerator, measured)
    advice = _near_limit(accelerator, measured)
    if not advice:  # a job near the limit needs no advice to shrink
        advice += _memory_fits(accelerator, [s for s in measured if _gpu(s) not in skip])
    return advice + unused + _idle(measured, skip)
