"""``nvidia-smi --query-gpu`` lines as ``Sample`` values, for images without Python NVML.

``nvidia-smi --query-gpu=<QUERY> --format=csv,noheader,nounits -lms <ms>`` prints one line per
GPU per interval. A field the GPU does not support reads ``[N/A]`` or ``[Not Supported]``; such a
value is None. nvidia-smi has no energy-counter field, so ``total_energy_consumption`` is None and
the summary integrates power instead.

``NvidiaSmiSampler`` runs that command as a child process for images without Python NVML. It
reads only the task's GPUs (``samples.owned_gpus``), naming them to nvidia-smi by UUID with
``--id=`` (a comma-separated list, as ``nvidia-smi -i 1,2,4``); a ``MIG-`` UUID is resolved to its
GPU through ``nvidia-smi -L``, which lists each GPU's MIG devices under it. Power of a GPU in MIG
mode is the whole GPU's: its samples say so (``power_scope="gpu"``).
Shipped into the container: standard library and ``airflow_gpu.profiling`` only, Python 3.8.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Container, Iterable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

from airflow_gpu.profiling.samples import Sample, owned_gpus
from airflow_gpu.profiling.summary import KeepsSamples, SampleStore

#: Query fields, in the order of ``Sample``'s (see ``nvidia-smi --help-query-gpu``).
QUERY = (
    "timestamp", "index", "uuid", "name", "utilization.gpu", "utilization.memory", "memory.used",
    "memory.total", "power.draw", "temperature.gpu", "clocks.sm",
)  # fmt: skip
MISSING = ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "")


def command(interval_ms: int, ids: str | None = None) -> list[str]:
    """The nvidia-smi command line that prints one CSV line per GPU (those of ``ids``, a
    comma-separated list, if given) every ``interval_ms``."""
    chosen = [] if ids is None else [f"--id={ids}"]
    return [
        "nvidia-smi",
        f"--query-gpu={','.join(QUERY)}",
        "--format=csv,noheader,nounits",
        *chosen,
        f"-lms={interval_ms}",
    ]


def _number(value: str) -> float | None:
    value = value.strip()
    if value in MISSING:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _time(value: str) -> float:
    """nvidia-smi's ``timestamp`` (``2026/11/23 14:50:01.123``, the host's local time)."""
    parsed = datetime.strptime(value.strip(), "%Y/%m/%d %H:%M:%S.%f")
    return parsed.astimezone(timezone.utc).timestamp()


def parse(lines: Iterable[str], whole_gpu: Container[int] = ()) -> Iterator[Sample]:
    """The samples in nvidia-smi's CSV lines; a line that is not one (a warning, a cut line) is skipped.

    ``whole_gpu``: indices of GPUs whose power is the whole GPU's while the task holds a MIG slice.
    """
    for row in csv.reader(line for line in lines if line.strip()):
        if len(row) != len(QUERY):
            continue
        try:
            time, index = _time(row[0]), int(row[1].strip())
        except ValueError:
            continue
        util, mem_util, used, total, power, temp, clock = (_number(v) for v in row[4:])
        yield Sample(
            time=time, gpu=index, uuid=row[2].strip(), name=row[3].strip(), gpu_util=util,
            mem_copy_util=mem_util, fb_used=used, fb_total=total, power_usage=power, gpu_temp=temp, sm_clock=clock,
            power_scope="gpu" if index in whole_gpu else None,
        )  # fmt: skip


# --- the devices: what the payload says about them ------------------------------------------

#: ``--query-gpu`` fields describing each GPU once, at the start.
DEVICE_QUERY = ("index", "uuid", "name", "memory.total", "mig.mode.current", "pci.bus_id", "driver_version")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # some nvidia-smi versions underline topo's header
_GPU = re.compile(r"GPU[0-9]+\Z")
_CUDA = re.compile(r"CUDA Version\s*:\s*([0-9]+\.[0-9]+)")


def parse_devices(lines: Iterable[str]) -> tuple[list[dict[str, Any]], str | None]:
    """``(gpus, driver)`` from ``--query-gpu=<DEVICE_QUERY> --format=csv,noheader,nounits`` lines."""
    gpus: list[dict[str, Any]] = []
    driver: str | None = None
    for row in csv.reader(line for line in lines if line.strip()):
        if len(row) != len(DEVICE_QUERY):
            continue
        cells = [cell.strip() for cell in row]
        try:
            index = int(cells[0])
        except ValueError:
            continue
        mig = {"enabled": True, "disabled": False}.get(cells[4].lower())
        gpus.append(
            {
                "index": index, "uuid": cells[1], "name": cells[2], "fb_total": _number(cells[3]), "mig": mig,
                "pci": None if cells[5] in MISSING else cells[5],
            }
        )  # fmt: skip
        driver = driver or (None if cells[6] in MISSING else cells[6])
    return gpus, driver


_LISTED = re.compile(r"\(UUID: ((?:GPU|MIG)-[^)\s]+)\)")


def parse_mig_parents(output: str) -> dict[str, str]:
    """``nvidia-smi -L``'s MIG devices, each UUID with the UUID of the GPU it is listed under."""
    parents: dict[str, str] = {}
    gpu = None
    for line in output.splitlines():
        found = _LISTED.search(line)
        if found is None:
            continue
        uuid = found.group(1)
        if uuid.startswith("GPU-"):
            gpu = uuid
        elif gpu is not None:
            parents[uuid] = gpu
    return parents


def parse_cuda(output: str) -> str | None:
    """The CUDA version in nvidia-smi's header (``CUDA Version: 12.4``) or ``--version`` (``CUDA Version : 12.4``)."""
    found = _CUDA.search(output)
    return found.group(1) if found else None


def parse_topology(output: str) -> dict[str, Any] | None:
    """``nvidia-smi topo -m`` as ``{"gpus": ["GPU0", ...], "matrix": [["X", "NV12"], ...]}``.

    The GPU columns lead the header (NIC columns and the CPU and NUMA affinity follow); each GPU
    row's first cells are its links. Older drivers say ``SOC`` for what newer ones call ``SYS``.
    None when the output is not such a matrix.
    """
    names: list[str] = []
    rows: dict[str, list[str]] = {}
    for raw in output.splitlines():
        line = _ANSI.sub("", raw)
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0].startswith("Legend"):
            break
        if not names and line[:1].isspace() and _GPU.match(tokens[0]):
            for token in tokens:
                if not _GPU.match(token):
                    break
                names.append(token)
        elif names and _GPU.match(tokens[0]) and not line[:1].isspace():
            rows[tokens[0]] = ["SYS" if cell == "SOC" else cell for cell in tokens[1 : 1 + len(names)]]
    if not names or set(rows) != set(names) or any(len(cells) != len(names) for cells in rows.values()):
        return None
    return {"gpus": names, "matrix": [rows[name] for name in names]}


# --- the sampler ------------------------------------------------------------------------------


class NvidiaSmiSampler(KeepsSamples):
    """``nvidia-smi --query-gpu ... -lms`` as a child process whose lines are the samples.

    The child runs in its own session (a Ctrl-C meant for the workload does not end the sampling
    early), and ``stop()`` terminates, waits for and reaps it: no zombie, no orphan. nvidia-smi
    missing or failing: ``start()`` returns False with ``note`` saying why, never an exception.
    ``env``: where ``NVIDIA_VISIBLE_DEVICES`` and ``CUDA_VISIBLE_DEVICES`` are read (this process's
    environment unless given).
    """

    source = "nvidia-smi"

    def __init__(self, interval: float, executable: str = "nvidia-smi", env: Mapping[str, str] | None = None) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.interval = interval
        self.executable = executable
        self.note: str | None = None
        self._env = os.environ if env is None else env
        self._ids: str | None = None  # --id= for the task's GPUs; None: every GPU seen is the task's
        self._whole_gpu: set[int] = set()  # GPUs the task holds a MIG slice of, or in MIG mode
        self._mig_parents: dict[str, str] | None = None
        self._path: str | None = None
        self._info: dict[str, Any] = {"driver": None, "cuda": None, "gpus": [], "topology": None}
        self._store = SampleStore()  # bounded: running summaries and a compacted series
        self._stopping = threading.Event()
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._last_other = ""

    @property
    def pid(self) -> int | None:
        """The sampling nvidia-smi's process id, while there is one."""
        return None if self._process is None else self._process.pid

    def _query(self, *args: str) -> tuple[int, str]:
        assert self._path is not None
        done = subprocess.run(
            [self._path, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=10
        )
        return done.returncode, done.stdout

    def start(self) -> bool:
        """Describe the GPUs, then start the sampling child; False (and ``note``) when it cannot."""
        self._path = shutil.which(self.executable)
        if self._path is None:
            self.note = f"nvidia-smi: {self.executable} not found on PATH"
            return False
        try:
            code, output = self._query(f"--query-gpu={','.join(DEVICE_QUERY)}", "--format=csv,noheader,nounits")
            gpus, driver = parse_devices(output.splitlines())
            if code != 0 or not gpus:
                said = next((line.strip() for line in output.splitlines() if line.strip()), f"exit code {code}")
                self.note = f"nvidia-smi: {said}" if code != 0 else "nvidia-smi: no GPU is visible to this container"
                return False
            owned = owned_gpus(self._env, [g["uuid"] for g in gpus], self._mig_parent)
            self.note = None if owned.note is None else f"nvidia-smi: {owned.note}"
            if not owned.indices:
                return False
            gpus = [g for g in gpus if g["index"] in owned.indices]
            self._ids = None if owned.everything else ",".join(g["uuid"] for g in gpus)
            self._whole_gpu = set(owned.slices) | {g["index"] for g in gpus if g["mig"]}
            self._info = {"driver": driver, "cuda": None, "gpus": gpus, "topology": None}
            self._info["cuda"] = parse_cuda(self._query()[1])
            self._info["topology"] = self._topology([f"GPU{g['index']}" for g in gpus])
            self._process = subprocess.Popen(
                [self._path, *command(max(1, round(self.interval * 1000)), self._ids)[1:]],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                text=True, bufsize=1, start_new_session=True,
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError) as error:
            self.note = f"nvidia-smi: {error}"
            return False
        self._reader = threading.Thread(target=self._read, name="airflow-gpu-nvidia-smi-reader", daemon=True)
        self._reader.start()
        return True

    def _mig_parent(self, uuid: str) -> str | None:
        """The GPU that the MIG device ``uuid`` is a slice of, from ``nvidia-smi -L`` (asked once)."""
        if self._mig_parents is None:
            code, output = self._query("-L")
            self._mig_parents = parse_mig_parents(output) if code == 0 else {}
        return self._mig_parents.get(uuid)

    def _topology(self, names: list[str]) -> dict[str, Any] | None:
        """``topo -m``'s matrix between the task's GPUs (``names``: ``GPU<index>``); for one GPU the
        matrix is known without it (``X``), and each nvidia-smi start initialises the driver's
        library again: a container's start is not slowed for nothing."""
        if len(names) == 1:
            return {"gpus": names, "matrix": [["X"]]}
        code, output = self._query("topo", "-m")
        every = parse_topology(output) if code == 0 else None
        if every is None or not set(names) <= set(every["gpus"]):
            return None
        at = [every["gpus"].index(name) for name in names]
        return {"gpus": names, "matrix": [[every["matrix"][i][j] for j in at] for i in at]}

    def _read(self) -> None:
        process = self._process
        assert process is not None and process.stdout is not None
        for line in process.stdout:
            taken = list(parse([line], self._whole_gpu))
            if taken:
                self._store.add_all(taken)
            elif line.strip():
                self._last_other = line.strip()
        if not self._stopping.is_set():
            code = process.wait()
            said = f": {self._last_other}" if self._last_other else ""
            self.note = f"nvidia-smi: sampling stopped early (exit code {code}{said})"

    def stop(self) -> None:
        """Terminate and reap the sampling child, then take a last reading (idempotent)."""
        process, self._process = self._process, None
        if process is None:
            return
        self._stopping.set()
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        if process.stdout is not None:
            process.stdout.close()
        try:  # the run's end, so that a run shorter than the interval has a duration
            chosen = [] if self._ids is None else [f"--id={self._ids}"]
            code, output = self._query(f"--query-gpu={','.join(QUERY)}", "--format=csv,noheader,nounits", *chosen)
        except (OSError, subprocess.SubprocessError):
            return
        if code == 0:
            self._store.add_all(parse(output.splitlines(), self._whole_gpu))

    def devices(self) -> dict[str, Any]:
        """``driver``, ``cuda``, ``gpus`` and ``topology``, as the payload carries them."""
        return dict(self._info)
