"""A MIG slice's memory is the slice's, not its GPU's (issue 25 leftovers, C).

Inside a MIG instance NVML reports the slice's framebuffer (``fb_total`` of a ``1g.10gb`` is about 9.5 GiB),
and the slice is all the task has: the advice must judge a near-full slice against the slice and point at
larger profiles of the same GPU, not at a larger GPU chosen from the parent's memory. Expected sizes are
the profile tables of NVIDIA's MIG user guide ("Supported MIG profiles": A100 40GB/80GB, H100 80GB,
H100 NVL 94GB, H200 141GB), not the catalog's own numbers.
"""

from __future__ import annotations

import pytest

from airflow_gpu.accelerators.spec import Accelerator
from airflow_gpu.profiling import advice
from airflow_gpu.profiling.advice import advise

GIB = 1024.0  # MiB
#: NVIDIA MIG user guide, "Supported MIG profiles": (GPU spec, profile, the slice's memory in GB).
SLICES = [
    *(("A100-40GB", p, gb) for p, gb in [("1g.5gb", 5), ("1g.10gb", 10), ("2g.10gb", 10), ("3g.20gb", 20),
                                        ("4g.20gb", 20), ("7g.40gb", 40)]),
    *(("A100-80GB", p, gb) for p, gb in [("1g.10gb", 10), ("1g.20gb", 20), ("2g.20gb", 20), ("3g.40gb", 40),
                                        ("4g.40gb", 40), ("7g.80gb", 80)]),
    *(("H100-80GB", p, gb) for p, gb in [("1g.10gb", 10), ("1g.20gb", 20), ("2g.20gb", 20), ("3g.40gb", 40),
                                        ("4g.40gb", 40), ("7g.80gb", 80)]),
    *(("H100-94GB", p, gb) for p, gb in [("1g.12gb", 12), ("1g.24gb", 24), ("2g.24gb", 24), ("3g.47gb", 47),
                                        ("4g.47gb", 47), ("7g.94gb", 94)]),
    *(("H200", p, gb) for p, gb in [("1g.18gb", 18), ("1g.35gb", 35), ("2g.35gb", 35), ("3g.71gb", 71),
                                   ("4g.71gb", 71), ("7g.141gb", 141)]),
]  # fmt: skip


def slice_total_mib(gb: int) -> float:
    """What NVML reports inside the slice: its GB in MiB, less a little the driver keeps."""
    return gb * 1e9 / 2**20 * 0.97


@pytest.mark.parametrize(("gpu", "profile", "gb"), SLICES)
def test_the_memory_of_a_slice_is_the_profile_s(gpu: str, profile: str, gb: int) -> None:
    accelerator = Accelerator.parse(f"{gpu}-MIG-{profile}")
    assert accelerator.device_memory_gb == gb
    assert advice._device_memory_gb(accelerator, slice_total_mib(gb)) == gb
    assert advice._device_memory_gb(accelerator, None) == gb


@pytest.mark.parametrize(("gpu", "profile", "gb"), [s for s in SLICES if not s[1].startswith("7g.")])
def test_a_nearly_full_slice_is_sent_to_a_larger_profile_of_its_gpu(gpu: str, profile: str, gb: int) -> None:
    total = slice_total_mib(gb)
    summary = {"gpu": 0, "samples": 600, "util_p95": 90.0, "fb_peak": total * 0.97, "fb_total": total}
    [near] = [a for a in advise([summary], f"{gpu}-MIG-{profile}") if a.kind == "memory-near-limit"]
    larger = [Accelerator.parse(name) for name in near.detail["bigger"]]
    assert larger, near.message
    for other in larger:  # the same GPU, a slice with more memory
        assert other.type == Accelerator.parse(gpu).type and other.mig is not None, other
        assert other.device_memory_gb > gb
        assert f"'{other}'" in near.message or str(other) in near.message
