"""Samples of the task's GPUs from NVML (nvidia-ml-py's ``pynvml``), taken in a background thread.

NVML is the driver's own library: a reading is a handful of calls that cost microseconds, where
``nvidia-smi`` costs a process. Every call may raise ``NVMLError_NotSupported`` (utilisation on a
MIG-enabled GPU, power on some boards, the energy counter before Volta): that field is None, and
the call is not made again for that GPU. Any other NVML error on one metric is None for that
reading only. No driver (``nvmlInit`` raises ``NVMLError_LibraryNotFound``), no ``pynvml``, no GPU:
``start()`` returns False with ``note`` saying why, never an exception.

Only the task's GPUs are read (``samples.owned_gpus``: ``NVIDIA_VISIBLE_DEVICES`` and
``CUDA_VISIBLE_DEVICES``), under NVML's own index; a ``MIG-`` UUID there is resolved to the GPU it
is a slice of (``nvmlDeviceGetHandleByUUID``, ``nvmlDeviceGetDeviceHandleFromMigDeviceHandle``).
Power and energy of a GPU in MIG mode are the whole GPU's (NVML has no energy counter for a MIG
device): its samples say so (``power_scope="gpu"``).

``nvml`` is the ``pynvml`` module, or an object with its names (tests inject a fake one).
Shipped into the container: standard library and ``airflow_gpu.profiling`` only, Python 3.8.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from airflow_gpu.profiling.samples import Sample, owned_gpus
from airflow_gpu.profiling.summary import KeepsSamples, SampleStore

MIB = 1024 * 1024
#: ``nvmlDeviceGetTopologyCommonAncestor`` levels as ``nvidia-smi topo -m`` labels them.
TOPOLOGY_LABELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def text(value: Any) -> str:
    """NVML's strings: ``str`` from nvidia-ml-py 11.5 on, ``bytes`` before (and in ctypes structures)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def bus_id(value: Any) -> str:
    """A PCI bus id as nvidia-smi prints it (8-digit domain, upper case), so that NVML's widths compare equal."""
    raw = text(value).strip().upper()
    parts = raw.split(":")
    if len(parts) == 2:  # no domain: domain 0
        parts.insert(0, "0")
    try:
        return f"{int(parts[0], 16):08X}:{parts[1]}:{parts[2]}" if len(parts) == 3 else raw
    except ValueError:
        return raw


def cuda_version(value: int) -> str:
    """``nvmlSystemGetCudaDriverVersion``'s 12040 as ``12.4``."""
    return f"{value // 1000}.{value % 1000 // 10}"


class _NeverRaised(Exception):
    """What the error clauses catch until ``start()`` has found the module's own NVMLError."""


class NvmlSampler(KeepsSamples):
    """Reads the task's GPUs each ``interval`` seconds, from ``start()`` to ``stop()``.

    ``env``: where ``NVIDIA_VISIBLE_DEVICES`` and ``CUDA_VISIBLE_DEVICES`` are read (this process's
    environment unless given).
    """

    source = "nvml"

    def __init__(self, interval: float, nvml: Any = None, env: Mapping[str, str] | None = None) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.interval = interval
        self.note: str | None = None
        #: True when pynvml is there but is not nvidia-ml-py's: worth a line even when nvidia-smi takes over.
        self.misconfigured = False
        self._nvml = nvml
        self._env = os.environ if env is None else env
        self._error: type[BaseException] = _NeverRaised  # nvml.NVMLError, once start() has checked it
        self._not_supported: type[BaseException] = _NeverRaised
        self._handles: list[Any] = []  # the task's GPUs' handles, in the order of _gpus
        self._slices: frozenset[int] = frozenset()  # indices of GPUs the task holds a MIG slice of
        self._gpus: list[dict[str, Any]] = []
        self._info: dict[str, Any] = {"driver": None, "cuda": None, "gpus": [], "topology": None}
        self._unsupported: set[tuple[int, str]] = set()
        self._store = SampleStore()  # bounded: running summaries and a compacted series
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._initialised = False

    # --- NVML calls: one field's failure is that field's None ----------------------------------

    def _call(self, name: str, *args: Any) -> Any:
        """``nvml.<name>(*args)``, or None when it fails or this nvidia-ml-py does not have it."""
        try:
            return getattr(self._nvml, name)(*args)
        except (self._error, AttributeError):
            return None

    def _metric(self, gpu: int, name: str, *args: Any) -> Any:
        """``nvml.<name>(*args)``; None when unsupported (remembered per GPU) or failing this time."""
        if (gpu, name) in self._unsupported:
            return None
        try:
            return getattr(self._nvml, name)(*args)
        except self._not_supported:
            self._unsupported.add((gpu, name))
        except self._error:
            pass
        except AttributeError:  # an nvidia-ml-py too old to have the function
            self._unsupported.add((gpu, name))
        return None

    # --- life cycle ----------------------------------------------------------------------------

    def start(self) -> bool:
        """Initialise NVML, read the devices and start sampling; False (and ``note``) when it cannot."""
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError:
                self.note = "NVML: pynvml (nvidia-ml-py) is not installed in the image"
                return False
        error = getattr(self._nvml, "NVMLError", None)
        if not (isinstance(error, type) and issubclass(error, BaseException)):
            where = getattr(self._nvml, "__file__", None) or type(self._nvml).__name__
            self.note = (
                f"NVML: the pynvml module at {where} is not nvidia-ml-py's (it has no NVMLError): "
                "pip install nvidia-ml-py in the image, or set AIRFLOW_GPU_PROFILER=nvidia-smi"
            )
            self.misconfigured = True
            return False
        self._error = error
        not_supported = getattr(self._nvml, "NVMLError_NotSupported", None)
        if isinstance(not_supported, type) and issubclass(not_supported, BaseException):
            self._not_supported = not_supported
        try:
            self._nvml.nvmlInit()
        except Exception as error:  # NVMLError_LibraryNotFound and kin, or a broken ctypes load
            self.note = f"NVML: no NVIDIA driver ({text(error) or type(error).__name__})"
            return False
        self._initialised = True
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
            handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except self._error as error:
            self.note = f"NVML: cannot list the GPUs ({text(error)})"
            self._shutdown()
            return False
        if not handles:
            self.note = "NVML: no GPU is visible to this container"
            self._shutdown()
            return False
        uuids = [self._call("nvmlDeviceGetUUID", handle) for handle in handles]
        owned = owned_gpus(self._env, ["" if u is None else text(u) for u in uuids], self._mig_parent)
        self.note = None if owned.note is None else f"NVML: {owned.note}"
        if not owned.indices:
            self._shutdown()
            return False
        self._handles = [handles[i] for i in owned.indices]
        self._slices = owned.slices
        try:
            self._info = self._read_info(owned.indices)
        except Exception as error:  # a pynvml whose shapes are not the ones known here
            self.note = f"NVML: cannot describe the GPUs ({type(error).__name__}: {error})"
            self._shutdown()
            return False
        self._thread = threading.Thread(target=self._run, name="airflow-gpu-nvml-sampler", daemon=True)
        self._thread.start()
        return True

    def _mig_parent(self, uuid: str) -> str | None:
        """The UUID of the GPU that the MIG device ``uuid`` is a slice of, or None."""
        try:
            handle = self._nvml.nvmlDeviceGetHandleByUUID(uuid)
        except TypeError:  # nvidia-ml-py before 11.5 takes bytes
            handle = self._call("nvmlDeviceGetHandleByUUID", uuid.encode())
        except (self._error, AttributeError):
            return None
        parent = None if handle is None else self._call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle)
        found = None if parent is None else self._call("nvmlDeviceGetUUID", parent)
        return None if found is None else text(found)

    def stop(self) -> None:
        """Take a last reading, join the thread and shut NVML down (idempotent)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stopping.set()
            thread.join(timeout=max(10.0, 3 * self.interval))
            if thread.is_alive():  # a driver call that hangs: leave NVML to the process exit
                self.note = "NVML: the sampler did not stop within its timeout"
                return
        self._shutdown()

    def _shutdown(self) -> None:
        if self._initialised:
            self._initialised = False
            self._call("nvmlShutdown")

    def devices(self) -> dict[str, Any]:
        """``driver``, ``cuda``, ``gpus`` and ``topology``, as the payload carries them."""
        return dict(self._info)

    # --- sampling ------------------------------------------------------------------------------

    def _run(self) -> None:
        due = time.monotonic()
        while True:
            self._take()
            due += self.interval
            now = time.monotonic()
            if due < now:  # a slow round: skip the readings missed rather than bunching them up
                due = now
            if self._stopping.wait(due - now):
                break
        self._take()  # the run's end, so that a run shorter than the interval has a duration

    def _take(self) -> None:
        try:
            now = time.time()
            taken = [self._read(i, handle, now) for i, handle in enumerate(self._handles)]  # i: in _gpus
        except Exception as error:  # never let the thread die: the run goes on without this reading
            self.note = f"NVML: a reading failed ({type(error).__name__}: {error})"
            return
        self._store.add_all(taken)

    def _read(self, position: int, handle: Any, now: float) -> Sample:
        nvml, gpu = self._nvml, self._gpus[position]
        index = gpu["index"]
        util = self._metric(index, "nvmlDeviceGetUtilizationRates", handle)
        memory = self._metric(index, "nvmlDeviceGetMemoryInfo", handle)
        power = self._metric(index, "nvmlDeviceGetPowerUsage", handle)
        energy = self._metric(index, "nvmlDeviceGetTotalEnergyConsumption", handle)
        temp = self._metric(index, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)
        clock = self._metric(index, "nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM)
        return Sample(
            time=now,
            gpu=index,
            uuid=gpu["uuid"],
            name=gpu["name"],
            gpu_util=None if util is None else float(util.gpu),
            mem_copy_util=None if util is None else float(util.memory),
            fb_used=None if memory is None else memory.used / MIB,
            fb_total=None if memory is None else memory.total / MIB,
            power_usage=None if power is None else power / 1000,  # mW
            total_energy_consumption=None if energy is None else float(energy),  # mJ
            gpu_temp=None if temp is None else float(temp),
            sm_clock=None if clock is None else float(clock),
            power_scope="gpu" if index in self._slices or gpu["mig"] else None,
        )

    # --- what the devices are ------------------------------------------------------------------

    def _read_info(self, indices: tuple[int, ...]) -> dict[str, Any]:
        nvml = self._nvml
        for position, index in enumerate(indices):  # not zip(strict=): this runs on Python 3.8
            handle = self._handles[position]
            memory = self._call("nvmlDeviceGetMemoryInfo", handle)
            mig = self._call("nvmlDeviceGetMigMode", handle)
            pci = self._call("nvmlDeviceGetPciInfo", handle)
            uuid = self._call("nvmlDeviceGetUUID", handle)
            name = self._call("nvmlDeviceGetName", handle)
            self._gpus.append(
                {
                    "index": index,
                    "uuid": "" if uuid is None else text(uuid),
                    "name": "" if name is None else text(name),
                    "fb_total": None if memory is None else memory.total / MIB,
                    "mig": None if mig is None else bool(mig[0] == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)),
                    "pci": None if pci is None else bus_id(pci.busId),
                }
            )
        driver = self._call("nvmlSystemGetDriverVersion")
        cuda = self._call("nvmlSystemGetCudaDriverVersion_v2")
        cuda = self._call("nvmlSystemGetCudaDriverVersion") if cuda is None else cuda
        return {
            "driver": None if driver is None else text(driver),
            "cuda": None if cuda is None else cuda_version(int(cuda)),
            "gpus": [dict(g) for g in self._gpus],
            "topology": self._topology(),
        }

    def _nvlinks(self, handle: Any, by_bus: dict[str, int]) -> tuple[dict[int, int], int]:
        """Active NVLinks of one GPU: to each peer GPU sampled (by position), and to NVSwitches."""
        nvml = self._nvml
        peers: dict[int, int] = {}
        switch = 0
        switch_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
        for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                active = nvml.nvmlDeviceGetNvLinkState(handle, link)
            except (self._error, AttributeError):  # no NVLink, or past this GPU's last link
                break
            if not active:
                continue
            kind = self._call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            if kind == switch_type:
                switch += 1
                continue
            remote = self._call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            peer = None if remote is None else by_bus.get(bus_id(remote.busId))
            if peer is not None:
                peers[peer] = peers.get(peer, 0) + 1
        return peers, switch

    def _topology(self) -> dict[str, Any] | None:
        """The ``nvidia-smi topo -m`` matrix of the task's GPUs: NV<n> over NVLink, else the PCIe path."""
        handles = self._handles
        by_bus = {g["pci"]: position for position, g in enumerate(self._gpus) if g["pci"]}
        links = [self._nvlinks(h, by_bus) for h in handles]
        matrix: list[list[str]] = []
        for i, a in enumerate(handles):
            row = []
            for j, b in enumerate(handles):
                direct = links[i][0].get(j, 0) or links[j][0].get(i, 0)
                switched = min(links[i][1], links[j][1])
                if i == j:
                    row.append("X")
                elif direct or switched:
                    row.append(f"NV{direct or switched}")
                else:
                    level = self._call("nvmlDeviceGetTopologyCommonAncestor", a, b)
                    if level not in TOPOLOGY_LABELS:
                        return None  # one unknown path: no matrix rather than a wrong one
                    row.append(TOPOLOGY_LABELS[level])
            matrix.append(row)
        return {"gpus": [f"GPU{g['index']}" for g in self._gpus], "matrix": matrix}
