"""A stand-in for nvidia-ml-py's ``pynvml``, the hardware boundary of the NVML sampler.

No GPU here, and NVIDIA ships no fake NVML. This one has pynvml's names and return shapes
(checked against nvidia-ml-py 13.615's ``pynvml.py``): ``nvmlDeviceGetMemoryInfo`` in bytes,
``nvmlDeviceGetPowerUsage`` in mW, ``nvmlDeviceGetTotalEnergyConsumption`` in mJ since "driver
load", utilisation as an object with ``.gpu`` and ``.memory``, ``nvmlDeviceGetMigMode`` as
``[current, pending]``, PCI information as a structure whose ``busId`` is ``bytes`` (ctypes), names
as ``str`` (or ``bytes``, as nvidia-ml-py before 11.5 returned them), and per-call errors as
``NVMLError`` subclasses (``NVMLError_NotSupported``, ...). A call before ``nvmlInit`` or after
``nvmlShutdown`` raises ``NVMLError_Uninitialized``, as the real library does, and is counted.
A GPU's MIG devices (``FakeGpu.migs``, their UUIDs) are found by ``nvmlDeviceGetHandleByUUID``
and lead to their GPU through ``nvmlDeviceGetDeviceHandleFromMigDeviceHandle``; like the real
library, a MIG device handle has no energy counter or power reading (``NotSupported``).

Injected as an object (``FakeNvml(...)``), or imported as ``pynvml`` by another process through the
``pynvml.py`` that ``install`` writes. Python 3.8 (the oldest the entrypoint supports) imports it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 18
NVML_NVLINK_DEVICE_TYPE_GPU = 0
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
_MESSAGES = {
    1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 6: "Not Found", 12: "NVML Shared Library Not Found",
    15: "GPU is lost",
}  # fmt: skip


class NVMLError(Exception):
    """pynvml's base error: ``.value`` is the NVML return code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


class NVMLError_Uninitialized(NVMLError):  # pynvml's names, here and below
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_UNINITIALIZED)


class NVMLError_InvalidArgument(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_INVALID_ARGUMENT)


class NVMLError_NotSupported(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_NOT_SUPPORTED)


class NVMLError_NotFound(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_NOT_FOUND)


class NVMLError_LibraryNotFound(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_LIBRARY_NOT_FOUND)


class NVMLError_GpuIsLost(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_GPU_IS_LOST)


@dataclass
class FakeGpu:
    """One board. A reading that is None is one the board does not support (``NotSupported``)."""

    name: str = "NVIDIA A10G"
    uuid: str = "GPU-5fd4a1c7-2d13-4b7e-9f5c-1d2a3b4c5d6e"
    memory_mib: int = 23028
    used_mib: int = 4096
    util: int | None = 87
    mem_util: int | None = 41
    power_mw: int | None = 212_345
    energy: bool = True
    temp: int | None = 61
    sm_clock: int | None = 1710
    mig: bool | None = False
    pci: str = "00000000:00:1E.0"
    nvlinks: dict[int, int] = field(default_factory=dict)  # peer index -> links
    switch_links: int = 0
    ancestor: int = NVML_TOPOLOGY_HOSTBRIDGE  # the PCIe path to every other GPU
    migs: list[str] = field(default_factory=list)  # UUIDs of its MIG devices (MIG-...)


class _Struct:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


class _MigHandle(_Handle):
    """A MIG device of GPU ``index``."""

    def __init__(self, index: int, uuid: str) -> None:
        super().__init__(index)
        self.uuid = uuid


class FakeNvml:
    """The ``pynvml`` module's surface over ``gpus``; ``calls`` counts each function's calls."""

    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        driver: str = "550.54.15",
        cuda: int = 12040,
        no_driver: bool = False,
        as_bytes: bool = False,
    ) -> None:
        self.gpus = gpus
        self.driver, self.cuda, self.no_driver, self.as_bytes = driver, cuda, no_driver, as_bytes
        self.initialised = False
        self.calls: Counter[str] = Counter()
        self.uninitialised_calls = 0
        self._lock = threading.Lock()
        self._loaded = time.monotonic()
        for name in dir(sys.modules[__name__]):
            if name.startswith("NVML_"):
                setattr(self, name, getattr(sys.modules[__name__], name))

    @classmethod
    def from_json(cls, config: dict[str, Any]) -> FakeNvml:
        gpus = [
            FakeGpu(**{**g, "nvlinks": {int(k): v for k, v in g.get("nvlinks", {}).items()}}) for g in config["gpus"]
        ]
        return cls(gpus, **{k: v for k, v in config.items() if k != "gpus"})

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": [asdict(g) for g in self.gpus], "driver": self.driver, "cuda": self.cuda,
            "no_driver": self.no_driver, "as_bytes": self.as_bytes,
        }  # fmt: skip

    def namespace(self) -> dict[str, Any]:
        """What a ``pynvml`` module made of this fake holds."""
        names = [n for n in dir(self) if n.startswith(("nvml", "NVML"))]
        return {name: getattr(self, name) for name in names}

    # --- the boundary's bookkeeping -----------------------------------------------------------

    def _enter(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1
            if not self.initialised:
                self.uninitialised_calls += 1
                raise NVMLError_Uninitialized()

    def _gpu(self, name: str, handle: Any) -> FakeGpu:
        self._enter(name)
        if isinstance(handle, _MigHandle):  # what a MIG device does not report (the whole GPU does)
            raise NVMLError_NotSupported()
        return self.gpus[handle.index]

    def _str(self, value: str) -> Any:
        return value.encode() if self.as_bytes else value

    @property
    def reading_calls(self) -> int:
        """Calls a reading makes (not the set-up's)."""
        per_reading = (
            "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption",
            "nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo",
        )  # fmt: skip
        return sum(self.calls[name] for name in per_reading)

    # --- pynvml ----------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        with self._lock:
            self.calls["nvmlInit"] += 1
            if self.no_driver:
                raise NVMLError_LibraryNotFound()
            self.initialised = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> Any:
        self._enter("nvmlSystemGetDriverVersion")
        return self._str(self.driver)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError_InvalidArgument()
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: Any) -> _Handle:
        self._enter("nvmlDeviceGetHandleByUUID")
        wanted = uuid.decode() if isinstance(uuid, bytes) else uuid
        for index, gpu in enumerate(self.gpus):
            if gpu.uuid == wanted:
                return _Handle(index)
            if wanted in gpu.migs:
                return _MigHandle(index, wanted)
        raise NVMLError_NotFound()

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any) -> _Handle:
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        if not isinstance(handle, _MigHandle):
            raise NVMLError_InvalidArgument()
        return _Handle(handle.index)

    def nvmlDeviceGetUUID(self, handle: Any) -> Any:
        if isinstance(handle, _MigHandle):
            self._enter("nvmlDeviceGetUUID")
            return self._str(handle.uuid)
        return self._str(self._gpu("nvmlDeviceGetUUID", handle).uuid)

    def nvmlDeviceGetName(self, handle: Any) -> Any:
        return self._str(self._gpu("nvmlDeviceGetName", handle).name)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> _Struct:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        if gpu.util is None or gpu.mig:  # NVML has no utilisation for a MIG-enabled GPU
            raise NVMLError_NotSupported()
        return _Struct(gpu=gpu.util, memory=gpu.mem_util or 0)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> _Struct:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        total, used = gpu.memory_mib * 2**20, gpu.used_mib * 2**20
        return _Struct(total=total, free=total - used, used=used)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        gpu = self._gpu("nvmlDeviceGetPowerUsage", handle)
        if gpu.power_mw is None:
            raise NVMLError_NotSupported()
        return gpu.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        gpu = self._gpu("nvmlDeviceGetTotalEnergyConsumption", handle)
        if not gpu.energy or gpu.power_mw is None:
            raise NVMLError_NotSupported()
        return 10**9 + int(gpu.power_mw * (time.monotonic() - self._loaded))  # mW x s = mJ

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError_InvalidArgument()
        if gpu.temp is None:
            raise NVMLError_NotSupported()
        return gpu.temp

    def nvmlDeviceGetClockInfo(self, handle: Any, kind: int) -> int:
        gpu = self._gpu("nvmlDeviceGetClockInfo", handle)
        if kind != NVML_CLOCK_SM:
            raise NVMLError_InvalidArgument()
        if gpu.sm_clock is None:
            raise NVMLError_NotSupported()
        return gpu.sm_clock

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", handle)
        if gpu.mig is None:
            raise NVMLError_NotSupported()
        mode = NVML_DEVICE_MIG_ENABLE if gpu.mig else NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetPciInfo(self, handle: Any) -> _Struct:
        gpu = self._gpu("nvmlDeviceGetPciInfo", handle)
        return _Struct(busId=gpu.pci.encode(), busIdLegacy=gpu.pci[4:].encode(), domain=0, bus=0, device=0)

    def _links(self, gpu: FakeGpu) -> list[int | None]:
        """The peer at each active link (None: an NVSwitch)."""
        peers: list[int | None] = [peer for peer, n in sorted(gpu.nvlinks.items()) for _ in range(n)]
        return peers + [None] * gpu.switch_links

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        gpu = self._gpu("nvmlDeviceGetNvLinkState", handle)
        links = self._links(gpu)
        if not links:
            raise NVMLError_NotSupported()
        if link >= len(links):
            raise NVMLError_InvalidArgument()
        return NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        gpu = self._gpu("nvmlDeviceGetNvLinkRemoteDeviceType", handle)
        return NVML_NVLINK_DEVICE_TYPE_SWITCH if self._links(gpu)[link] is None else NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> _Struct:
        gpu = self._gpu("nvmlDeviceGetNvLinkRemotePciInfo", handle)
        peer = self._links(gpu)[link]
        bus = "00000000:C0:00.0" if peer is None else self.gpus[peer].pci
        return _Struct(busId=bus.encode())

    def nvmlDeviceGetTopologyCommonAncestor(self, first: Any, second: Any) -> int:
        gpu = self._gpu("nvmlDeviceGetTopologyCommonAncestor", first)
        return NVML_TOPOLOGY_INTERNAL if first.index == second.index else gpu.ancestor


def install(directory: Path, nvml: FakeNvml) -> dict[str, str]:
    """Write ``pynvml.py`` (this fake, as configured) into ``directory``; the PYTHONPATH that finds it."""
    directory.mkdir(parents=True, exist_ok=True)
    here = str(Path(__file__).resolve().parent)
    (directory / "pynvml.py").write_text(
        "import json, sys\n"
        f"sys.path.insert(0, {here!r})\n"
        "import fake_nvml\n"
        f"_fake = fake_nvml.FakeNvml.from_json(json.loads({json.dumps(nvml.to_json())!r}))\n"
        "globals().update(_fake.namespace())\n"
    )
    return {"PYTHONPATH": str(directory)}
