"""A local AWS Batch with GPU queues and spot faults (``BatchEmulator``), on moto's server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_gpu.testing.batch.compute import BatchSetup, ComputeEnvironmentSpec, QueueSpec
    from airflow_gpu.testing.batch.emulator import BatchEmulator

__all__ = ["BatchEmulator", "BatchSetup", "ComputeEnvironmentSpec", "QueueSpec"]


def __getattr__(name: str) -> Any:
    if name == "BatchEmulator":
        from airflow_gpu.testing.batch.emulator import BatchEmulator

        return BatchEmulator
    if name in ("BatchSetup", "ComputeEnvironmentSpec", "QueueSpec"):
        from airflow_gpu.testing.batch import compute

        return getattr(compute, name)
    raise AttributeError(name)
