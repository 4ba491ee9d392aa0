"""Emulated GPUs: what the NVIDIA device plugin and container toolkit hand a GPU container.

On a real node, a container allocated GPUs gets ``NVIDIA_VISIBLE_DEVICES`` (their UUIDs), and the
driver's ``nvidia-smi`` mounted into its file system. The emulators have no GPUs, so a container
they allocate GPUs to gets the same variable and an ``nvidia-smi`` first on its ``PATH`` that
answers the queries a profiler makes (``--query-gpu``, ``-lms``, ``topo -m``, the version
header), in nvidia-smi's own formats. Its readings follow the workload, so that a busy workload
shows a busy GPU and an idle one an idle GPU: the container's CPU time fills its GPUs in order
(one busy core keeps GPU 0 at 100 %, the others idle), resident memory stands for device memory,
power rises from idle to the board's limit with utilisation. They are not a model of a GPU; they
let the profiling path, the report and its advice be tested end to end. A MIG device reads
utilisation ``[N/A]``, as NVML reports it.

Nothing is installed anywhere a user's own ``nvidia-smi`` would be shadowed: the executable lives
in the emulator's scratch directory and is only on the ``PATH`` of the containers it serves.
"""

from __future__ import annotations

import functools
import hashlib
import os
import py_compile
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from airflow_gpu.accelerators import catalog

#: The board power limit in W, per catalog type (the vendors' data sheets); others use DEFAULT_POWER_W.
POWER_LIMIT_W = {
    "T4": 70, "L4": 72, "A10G": 300, "A10": 150, "L40S": 350, "V100": 300, "A100": 400,
    "H100": 700, "H200": 700, "B200": 1000,
}  # fmt: skip
DEFAULT_POWER_W = 300
#: The driver the emulated nodes report (their ``nvidia.com/cuda.driver.major`` label says 570).
DRIVER_VERSION = "570.133.20"
CUDA_VERSION = "12.8"


@dataclass(frozen=True)
class EmulatedGpu:
    """One device as the emulated ``nvidia-smi`` reports it."""

    index: int
    uuid: str
    name: str
    memory_mib: int
    power_limit_w: float
    nvlink: bool = False
    mig: bool = False


def devices(
    accelerator: str,
    indices: list[int],
    host: str,
    *,
    memory_gb: int | None = None,
    mig_profile: str | None = None,
) -> list[EmulatedGpu]:
    """The devices ``indices`` of a host carrying ``accelerator`` (a catalog name; the variant with
    ``memory_gb`` if given), as its container sees them.

    Inside a container the visible devices are numbered from 0, in allocation order; the UUID is
    the physical device's, stable per host and index.
    """
    entry = catalog.lookup(accelerator)
    variants = [v for v in entry.variants if memory_gb in (None, v.memory_gb)] if entry else []
    variant = variants[0] if variants else None
    product = variant.gfd_product if variant and variant.gfd_product else f"NVIDIA-{accelerator}"
    memory_gb = variant.memory_gb if variant else 16
    if mig_profile:
        memory_gb = int(mig_profile.split(".")[1].rstrip("gb"))
    name = product.replace("-", " ") + (f" MIG {mig_profile}" if mig_profile else "")
    power = POWER_LIMIT_W.get(entry.name if entry else accelerator, DEFAULT_POWER_W)
    nvlink = bool(variant and variant.form_factor.upper().startswith("SXM"))
    return [
        EmulatedGpu(
            index=visible,
            uuid=f"GPU-{_uuid(host, physical)}",
            name=name,
            memory_mib=memory_gb * 1024 - 512,  # what the driver reserves is not usable
            power_limit_w=float(power),
            nvlink=nvlink and len(indices) > 1,
            mig=mig_profile is not None,
        )
        for visible, physical in enumerate(indices)
    ]


def _uuid(host: str, index: int) -> str:
    digest = hashlib.sha1(f"{host}/{index}".encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def install(gpus: list[EmulatedGpu], directory: Path | None = None) -> dict[str, str]:
    """Write the ``nvidia-smi`` for these devices; the environment a container gets with them.

    ``nvidia-smi`` is a script of three lines run by this interpreter without ``site`` (``-S -E``:
    the venv's path files cost more than the answer); it calls ``nvidia_smi_shim.run`` with the
    devices, from a copy of that module beside it, already compiled (a script is compiled at every
    call, a module once). Returns ``NVIDIA_VISIBLE_DEVICES`` and ``AIRFLOW_GPU_EMULATED_SMI_DIR``
    (the directory to put first on the container's ``PATH``).
    """
    where = directory or Path(tempfile.mkdtemp(prefix="emulated-gpus-"))
    (where / "__pycache__").mkdir(parents=True, exist_ok=True)
    source, compiled = _shim()
    (where / f"{_SHIM}.py").write_text(source)
    (where / "__pycache__" / f"{_SHIM}.{sys.implementation.cache_tag}.pyc").write_bytes(compiled)
    smi = where / "nvidia-smi"
    devices = [asdict(g) for g in gpus]
    smi.write_text(f"#!{sys.executable} -SE\nimport {_SHIM}\n\n{_SHIM}.run({devices!r})\n")
    smi.chmod(0o755)
    return {"NVIDIA_VISIBLE_DEVICES": ",".join(g.uuid for g in gpus), SMI_DIR_ENV: str(where)}


_SHIM = "nvidia_smi_shim"


@functools.cache
def _shim() -> tuple[str, bytes]:
    """The shim's source and its bytecode, compiled once per process. The bytecode is an unchecked
    hash-based pyc: valid wherever it is copied, whatever the copy's modification time."""
    source = Path(__file__).with_name(f"{_SHIM}.py")
    with tempfile.TemporaryDirectory() as scratch:
        pyc = Path(scratch) / "shim.pyc"
        py_compile.compile(
            str(source), cfile=str(pyc), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
        )
        return source.read_text(), pyc.read_bytes()


SMI_DIR_ENV = "AIRFLOW_GPU_EMULATED_SMI_DIR"


def with_devices(env: dict[str, str], gpu_env: dict[str, str]) -> dict[str, str]:
    """``env`` with the devices' variables and their ``nvidia-smi`` first on ``PATH``."""
    if not gpu_env:
        return env
    path = gpu_env[SMI_DIR_ENV] + os.pathsep + env.get("PATH", os.environ.get("PATH", ""))
    return {**env, "NVIDIA_VISIBLE_DEVICES": gpu_env["NVIDIA_VISIBLE_DEVICES"], "PATH": path}
