"""How a training script is launched with Hugging Face Accelerate on an accelerator spec (pure).

One model renders the ``accelerate launch`` argument list, so that every target (the worker, a
Kubernetes pod or Indexed Job, an AWS Batch job or multi-node job) launches the same way, and
refuses at DAG parse time what could only fail on the GPUs. Facts it rests on (accelerate 1.15,
DESIGN.md):

* ``--num_processes`` is the total over all machines; each machine runs ``num_processes //
  num_machines``;
* ``--multi_gpu`` needs at least two processes and excludes FSDP and DeepSpeed (they launch the
  processes themselves);
* an image's ``default_config.yaml`` overrides every default, so every choice is passed as a flag;
* on a machine without a GPU, one process is ``--cpu``; several CPU processes are ``--multi_gpu``
  with ``ACCELERATE_USE_CPU=1`` (gloo), which is how the same DAG trains on a laptop.

In a container the command is ``python3 -c <find_accelerate> accelerate launch ...``: the image's
command runs without a login shell, and the image the docs recommend
(``huggingface/accelerate:gpu-release-*``) has accelerate on PATH only in one (``find_accelerate``
says where it looks instead).
"""

from __future__ import annotations

import ast
import functools
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from airflow_gpu.accelerators.errors import AcceleratorSpecError
from airflow_gpu.accelerators.spec import Accelerator, _unwrap

MixedPrecision = Literal["no", "fp16", "bf16", "fp8"]
Target = Literal["local", "kubernetes", "batch"]
#: The compute capability each precision needs on NVIDIA (bf16: Ampere; fp8: Ada and Hopper).
MIN_COMPUTE_CAPABILITY = {"bf16": (8, 0), "fp8": (8, 9)}
SPOT_CAPACITIES = ("spot", "spot-if-available")
#: The program a container's launch starts first: any Python 3 on the image's PATH.
PYTHON = "python3"


class AccelerateLaunch(BaseModel):
    """One ``accelerate launch``: what to train, on how many machines, with which distribution.

    ``accelerator`` None is a machine without GPUs (CPU processes over gloo). ``num_processes``
    is the total over all machines, by default one per GPU (one per machine on CPU).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    training_script: str
    script_args: tuple[str, ...] = ()
    accelerator: Accelerator | None = None
    num_machines: int = Field(1, ge=1)
    num_processes: int | None = Field(None, ge=1)
    mixed_precision: MixedPrecision = "no"
    dynamo_backend: str | None = None
    fsdp: Mapping[str, str | int | bool] | bool | None = None
    deepspeed_config: str | None = None
    main_process_port: int = Field(29500, ge=1, le=65535)
    accelerate_config_file: str | None = None
    target: Target = "local"
    capacity: str | None = None

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise _unwrap(error) from None

    # --- what it comes to -------------------------------------------------------------------

    @property
    def gpus_per_machine(self) -> int:
        return self.accelerator.count if self.accelerator is not None else 0

    @property
    def total_processes(self) -> int:
        if self.num_processes is not None:
            return self.num_processes
        return self.num_machines * (self.gpus_per_machine or 1)

    @property
    def processes_per_machine(self) -> int:
        return self.total_processes // self.num_machines

    @property
    def distributes_itself(self) -> bool:
        """FSDP and DeepSpeed start their own processes: no ``--multi_gpu`` with them."""
        return bool(self.fsdp) or self.deepspeed_config is not None

    # --- refused at parse time --------------------------------------------------------------

    @model_validator(mode="after")
    def _check(self) -> AccelerateLaunch:
        machines, total = self.num_machines, self.total_processes
        if total % machines:
            raise AcceleratorSpecError(
                "num_processes", total, f"is the total over all machines: not a multiple of num_machines={machines}",
                [f"{machines * n}" for n in (1, 2, 4, 8)],
            )  # fmt: skip
        if self.gpus_per_machine and self.processes_per_machine > self.gpus_per_machine:
            raise AcceleratorSpecError(
                "num_processes", total,
                f"{self.processes_per_machine} processes per machine but {self.accelerator} has "
                f"{self.gpus_per_machine} GPU(s) a machine",
                [f"at most {self.gpus_per_machine * machines} on {machines} machine(s)"],
            )  # fmt: skip
        self._check_precision()
        if self.fsdp and self.deepspeed_config is not None:
            raise AcceleratorSpecError("fsdp", self.fsdp, "cannot be combined with deepspeed_config", ["one of them"])
        if machines > 1 and self.target == "batch" and self.capacity in SPOT_CAPACITIES:
            raise AcceleratorSpecError(
                "num_machines", machines, "AWS Batch multi-node parallel jobs do not run on Spot capacity",
                ["job_queue=<an on-demand queue>", "num_machines=1"],
            )  # fmt: skip
        if machines > 1 and self.target == "local":
            raise AcceleratorSpecError(
                "num_machines", machines, "target='local' is the worker, one machine",
                ["target='kubernetes'", "target='batch'", "num_machines=1"],
            )  # fmt: skip
        if self.target == "local" and "{{" not in self.training_script and not Path(self.training_script).is_file():
            raise AcceleratorSpecError(
                "training_script", self.training_script, "does not exist on this machine", ["a path to a file"]
            )
        return self

    def _check_precision(self) -> None:
        needed = MIN_COMPUTE_CAPABILITY.get(self.mixed_precision)
        if needed is None or self.accelerator is None:
            return
        capability = self.accelerator.compute_capability
        if capability is None:  # AMD, Neuron, TPU: their own precision rules, not checked here
            return
        major, minor = (int(part) for part in capability.split(".")[:2])
        if (major, minor) < needed:
            raise AcceleratorSpecError(
                "mixed_precision", self.mixed_precision,
                f"needs compute capability {needed[0]}.{needed[1]}, {self.accelerator.type} has {capability}",
                [p for p in ("no", "fp16", "bf16", "fp8") if MIN_COMPUTE_CAPABILITY.get(p, (0, 0)) <= (major, minor)],
            )  # fmt: skip

    # --- the command ------------------------------------------------------------------------

    def argv(self, machine_rank: int | str = 0, main_process_ip: str | None = None) -> list[str]:
        """``accelerate launch ...`` for one machine: ``machine_rank`` and ``main_process_ip`` may be
        shell references (``"$JOB_COMPLETION_INDEX"``) that the target fills in."""
        args = ["accelerate", "launch"]
        # With a config file, only what was asked for here is a flag: accelerate reads the config's
        # distributed type, precision and dynamo backend only where no flag gives them.
        configured, asked = self.accelerate_config_file is not None, self.model_fields_set
        if configured:
            args += ["--config_file", str(self.accelerate_config_file)]
        args += ["--num_processes", str(self.total_processes), "--num_machines", str(self.num_machines)]
        if not configured or "mixed_precision" in asked:
            args += ["--mixed_precision", self.mixed_precision]
        if not configured or "dynamo_backend" in asked:
            args += ["--dynamo_backend", self.dynamo_backend or "no"]
        if configured and not self.distributes_itself:
            pass  # the config's distributed type (it may be FSDP or DeepSpeed)
        elif self.gpus_per_machine == 0 and self.total_processes == 1:
            args.append("--cpu")
        elif self.total_processes > 1 and not self.distributes_itself:
            args.append("--multi_gpu")  # also gloo on CPU, with ACCELERATE_USE_CPU (environment())
        if self.fsdp:
            args.append("--use_fsdp")
            options = self.fsdp if isinstance(self.fsdp, Mapping) else {}
            for key, value in options.items():
                args += [f"--fsdp_{key}", str(value).lower() if isinstance(value, bool) else str(value)]
        if self.deepspeed_config is not None:
            args += ["--use_deepspeed", "--deepspeed_config_file", self.deepspeed_config]
            if self.num_machines > 1:  # else pdsh over a hostfile, which pods and Batch nodes do not have
                args += ["--deepspeed_multinode_launcher", "standard"]
        if self.num_machines > 1:
            if main_process_ip is None:
                raise ValueError("a launch on several machines needs main_process_ip")
            args += ["--machine_rank", str(machine_rank), "--main_process_ip", main_process_ip]
        args += ["--main_process_port", str(self.main_process_port)]
        return [*args, self.training_script, *self.script_args]

    def command(self, machine_rank: str, main_process_ip: str) -> list[str]:
        """The container command of one machine: ``argv()`` started by ``find_accelerate`` (shipped
        in the command), which finds accelerate without a login shell; on several machines through
        a shell that fills in the rank and the main machine's address when the machine starts
        (``machine_rank`` and ``main_process_ip`` are shell words, e.g. ``'"$JOB_COMPLETION_INDEX"'``)."""
        if self.num_machines == 1:
            return [PYTHON, "-c", finder_source(), *self.argv()]
        rank, address = "@@RANK@@", "@@MAIN@@"
        script = shlex.join([PYTHON, "-c", finder_source(), *self.argv(machine_rank=rank, main_process_ip=address)])
        return ["/bin/sh", "-c", "exec " + script.replace(rank, machine_rank).replace(address, main_process_ip)]

    def environment(self) -> dict[str, str]:
        """What the launcher needs beside its flags: CPU processes over gloo."""
        return {"ACCELERATE_USE_CPU": "1"} if self.gpus_per_machine == 0 else {}


class _Shippable(ast.NodeTransformer):
    """Drops what an old ``python3`` cannot parse or the container does not need: annotations, the
    ``__future__`` import, docstrings."""

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        return None if node.module == "__future__" else node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        return None if node.value is None else ast.Assign(targets=[node.target], value=node.value)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None
        return self._without_docstring(node)

    def visit_Module(self, node: ast.Module) -> ast.AST:
        return self._without_docstring(node)

    def _without_docstring(self, node: ast.FunctionDef | ast.Module) -> ast.AST:
        self.generic_visit(node)
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
        return node


@functools.cache
def finder_source() -> str:
    """``find_accelerate``'s source as shipped in the command: parsed by any Python 3, a few KiB."""
    source = (Path(__file__).parent / "find_accelerate.py").read_text()
    return ast.unparse(ast.fix_missing_locations(_Shippable().visit(ast.parse(source))))
