"""How much ``/dev/shm`` a GPU task gets when the user says ``"auto"``.

Docker and Kubernetes give a container 64 MiB of ``/dev/shm``. PyTorch's DataLoader workers and
NCCL pass tensors through it, and 64 MiB makes them crash with "bus error" or hang. Both backends
(a memory-backed emptyDir on Kubernetes, ``sharedMemorySize`` on AWS Batch) use this rule, so the
same spec gets the same ``/dev/shm`` wherever it runs.
"""

from __future__ import annotations

from airflow_gpu.accelerators.errors import AcceleratorSpecError
from airflow_gpu.accelerators.quantities import MemoryAmount, memory_mib
from airflow_gpu.accelerators.spec import Accelerator

SharedMemory = MemoryAmount | None

#: What ``"auto"`` gives each whole device (or each MIG slice), before the memory cap below.
AUTO_MIB_PER_DEVICE = 8 * 1024
AUTO_MIB_PER_MIG_SLICE = 2 * 1024
#: Upper bound of ``"auto"``: more than this is never needed for data loading or NCCL buffers.
AUTO_MAX_MIB = 64 * 1024
#: Memory-backed ``/dev/shm`` counts against the container's memory: ``"auto"`` takes at most
#: this share of it, leaving the rest to the process.
AUTO_MAX_SHARE_OF_MEMORY = 0.5


def shared_memory_mib(accelerator: Accelerator, size: SharedMemory, memory: MemoryAmount | None) -> int | None:
    """MiB of ``/dev/shm`` to give; None means "leave the runtime's default"."""
    if size is None or size == 0 or (isinstance(size, str) and size.strip().lower() in {"none", "default"}):
        return None
    if isinstance(size, str) and size.strip().lower() == "auto":
        per_unit = AUTO_MIB_PER_MIG_SLICE if accelerator.mig is not None else AUTO_MIB_PER_DEVICE
        mib = min(per_unit * accelerator.count, AUTO_MAX_MIB)
        if memory is not None:
            mib = min(mib, int(memory_mib(memory) * AUTO_MAX_SHARE_OF_MEMORY))
        return max(mib, 64)
    mib = memory_mib(size, "shared_memory")
    if memory is not None and mib >= memory_mib(memory):
        raise AcceleratorSpecError(
            "shared_memory",
            size,
            f"/dev/shm is backed by the task's memory and must be smaller than it ({memory})",
            ["'auto'", "a smaller amount", "None"],
        )
    return mib
