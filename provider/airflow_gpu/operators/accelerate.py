"""``AccelerateTrainOperator``: train a script with Hugging Face Accelerate on N GPUs on M machines.

One launch model (``accelerators.accelerate.AccelerateLaunch``) renders ``accelerate launch`` and
refuses at DAG parse time what could only fail on the GPUs; the target decides where it runs:

* ``local``: a subprocess on the worker (``operators.accelerate_local``); a spec whose GPUs the
  worker does not have fails at execute, and no accelerator trains on CPU processes over gloo;
* ``kubernetes``: one machine is a ``GPUKubernetesOperator`` pod; several are an Indexed Job and a
  headless Service (``operators.accelerate_kubernetes``);
* ``batch``: one machine is a ``GPUBatchOperator`` job; several are a multi-node parallel job
  (``operators.accelerate_batch``).

The GPU operators are not re-implemented: the backend's own arguments (image, capacity, spot,
namespace, queues...) go to one of them, built inside this task, so spot fallback, profiling,
results and cleanup are theirs. It is built at parse time too, in a DAG of its own, so that its
checks (image, capacity, queues) fail the DAG file as they would on the GPU operators.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_gpu.accelerators.accelerate import AccelerateLaunch, MixedPrecision, Target
from airflow_gpu.accelerators.errors import AcceleratorSpecError
from airflow_gpu.accelerators.spec import Accelerator, parse_candidates
from airflow_gpu.links.profile import GPUProfileLink
from airflow_gpu.operators.gpu_profile import check_interval, profiled_by_default
from airflow_gpu.spot.policy import Capacity

if TYPE_CHECKING:
    from airflow.sdk import Context

TARGETS = ("local", "kubernetes", "batch")


@cache
def _base_operator_arguments() -> frozenset[str]:
    """What ``BaseOperator`` itself takes; every other keyword belongs to the target's GPU operator."""
    return frozenset(inspect.signature(BaseOperator.__init__).parameters) - {"self", "kwargs"}


class AccelerateTrainOperator(BaseOperator):
    """Run ``accelerate launch training_script`` on an accelerator spec, here or on a cluster.

    :param training_script: the script (a path on the worker for ``local``, in the image otherwise).
    :param script_args: its arguments; templated.
    :param accelerator: ``"H100:8"`` (GPUs per machine), candidates in preference order with the
        same GPU count, or None for CPU processes (``local`` only).
    :param num_machines: machines (pods, Batch nodes); more than one needs ``kubernetes`` or ``batch``.
    :param num_processes: processes over all machines (default: one per GPU; one per machine on CPU).
    :param mixed_precision: ``"no"``, ``"fp16"``, ``"bf16"`` (compute capability 8.0+) or ``"fp8"`` (8.9+).
    :param dynamo_backend: ``torch.compile`` backend (``"inductor"``), default none.
    :param fsdp: True, or FSDP options (``{"sharding_strategy": "FULL_SHARD"}`` -> ``--fsdp_sharding_strategy``).
    :param deepspeed_config: a DeepSpeed config file; not with ``fsdp``.
    :param main_process_port: the rendezvous port on the main machine; templated (a template is checked
        once rendered, a number at parse time).
    :param accelerate_config_file: an accelerate config: it decides the distributed type, precision
        and dynamo backend unless ``mixed_precision`` or ``dynamo_backend`` are given here.
    :param env: environment variables for the training processes; templated.
    :param target: ``"local"``, ``"kubernetes"`` or ``"batch"``.
    :param gpu_profile: sample the GPUs into XCom ``gpu_profile`` (default: on for NVIDIA GPUs).
    :param profile_interval: seconds between samples (0.05 to 60).
    :param capacity: ``"spot"``, ``"on-demand"``, ``"spot-if-available"`` (Kubernetes); on Batch the
        queues say it, and several machines must be on-demand.
    :param poll_interval: seconds between looks at the pod, Job or Batch job (the target operator's
        default, 2 s for an Indexed Job).
    :param backend_args: the target operator's arguments as one mapping, to map over.
    :param partial_backend_args: what ``.partial()`` was given for the target operator (set by it).

    Every other keyword goes to the target's operator: ``GPUKubernetesOperator`` (``namespace``,
    ``image``, ``spot``, ``node_label_scheme``...) or ``GPUBatchOperator`` (``job_queues``, ``image``,
    ``spot``, ``vcpus``...), as does ``backend_args`` (a mapping: what ``.expand()`` maps over; a
    keyword given directly wins). The DAG's ``default_args`` for those operators apply too.

    The training script returns a value by printing ``::airflow-gpu-result::<json>`` on its main
    process; it becomes the task's return value. A success without one (none printed, or the log
    could not be read) returns None with a warning saying which.
    """

    template_fields: Sequence[str] = ("training_script", "script_args", "main_process_port", "env", "backend_templates")
    operator_extra_links = (GPUProfileLink(),)
    ui_color = "#ffd8a8"

    def __init__(
        self,
        *,
        training_script: str,
        script_args: Sequence[str] = (),
        accelerator: str | Accelerator | Sequence[str | Accelerator] | None = None,
        num_machines: int = 1,
        num_processes: int | None = None,
        mixed_precision: MixedPrecision = "no",
        dynamo_backend: str | None = None,
        fsdp: Mapping[str, str | int | bool] | bool | None = None,
        deepspeed_config: str | None = None,
        main_process_port: int | str = 29500,
        accelerate_config_file: str | None = None,
        env: Mapping[str, str] | None = None,
        target: Target = "local",
        gpu_profile: bool | None = None,
        profile_interval: float = 1.0,
        capacity: Capacity | None = None,
        poll_interval: float | None = None,
        backend_args: Mapping[str, Any] | None = None,
        partial_backend_args: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        base = _base_operator_arguments()
        flat = {k: kwargs.pop(k) for k in list(kwargs) if k not in base}
        backend = {**(partial_backend_args or {}), **(backend_args or {}), **flat}
        if target not in TARGETS:
            raise AcceleratorSpecError("target", target, "unknown target", TARGETS)
        if target != "local":  # the DAG's default_args for the target's operator (namespace, job_queue...)
            accepted = _parameters(_backend_class(target))
            defaults = kwargs.get("default_args") or {}
            backend = {**{k: v for k, v in defaults.items() if k in accepted and k not in base}, **backend}
            _check_backend_arguments(target, backend, accepted)
        super().__init__(**kwargs)
        self.target: Target = target
        self.candidates = parse_candidates(accelerator) if accelerator is not None else ()
        if target != "local" and not self.candidates:
            raise AcceleratorSpecError("accelerator", None, f"target={target!r} needs one", ["'H100:8'", "'L4'"])
        if len({c.count for c in self.candidates}) > 1:
            raise AcceleratorSpecError(
                "accelerator", [str(c) for c in self.candidates],
                "candidates must have the same GPU count: the launch's process count does not change on fallback",
                [str(c) for c in self.candidates if c.count == self.candidates[0].count],
            )  # fmt: skip
        if target == "batch" and capacity is not None:
            raise AcceleratorSpecError(
                "capacity", capacity, "on AWS Batch the job queues decide the capacity",
                ["job_queues={'spot': ..., 'on-demand': ...}", "job_queue=<an on-demand queue>"],
            )  # fmt: skip
        if target == "local" and backend:
            raise TypeError(
                f"AccelerateTrainOperator(target='local') got arguments for a cluster: {', '.join(sorted(backend))}"
            )
        self.launches = tuple(
            AccelerateLaunch(
                training_script=training_script, script_args=tuple(script_args), accelerator=candidate,
                num_machines=num_machines, num_processes=num_processes, mixed_precision=mixed_precision,
                dynamo_backend=dynamo_backend, fsdp=fsdp, deepspeed_config=deepspeed_config,
                main_process_port=_parse_time_port(main_process_port), accelerate_config_file=accelerate_config_file,
                target=target, capacity=capacity or _batch_capacity(backend),
            )
            for candidate in (self.candidates or (None,))
        )  # fmt: skip
        self.training_script = training_script
        self.script_args = list(script_args)
        self.main_process_port = main_process_port
        self.env = dict(env or {})
        self.gpu_profile = profiled_by_default(self.candidates) if gpu_profile is None else bool(gpu_profile)
        self.gpu_profile = self.gpu_profile and bool(self.candidates)
        self.profile_interval = check_interval(profile_interval)
        self.capacity = capacity
        self.poll_interval = poll_interval
        self.num_machines = num_machines
        self.backend_kwargs = backend
        # Templated through this operator (its own fields are rendered before execute), then given as is.
        templated = _backend_class(target).template_fields if target != "local" else ()
        self.backend_templates = {k: v for k, v in backend.items() if k in templated}
        self._runner: Any = None
        if target != "local":  # the backend operator's own parse-time checks, now
            self._backend_operator(self.launches[0])

    @property
    def launch(self) -> AccelerateLaunch:
        """The launch, rendered: built again from the rendered fields at execute."""
        return self.launches[0].model_copy(
            update={
                "training_script": self.training_script,
                "script_args": tuple(self.script_args),
                "main_process_port": _port(self.main_process_port),
            }
        )

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """``.partial()`` takes the target operator's arguments too: Airflow checks mapped arguments
        against ``__init__``'s own names, so they travel as ``backend_args``; map over them with
        ``.expand(backend_args=[...])``."""
        own = _parameters(cls) | _base_operator_arguments()
        backend = {k: kwargs.pop(k) for k in list(kwargs) if k not in own}
        if backend:
            kwargs["partial_backend_args"] = backend
        return super().partial(**kwargs)

    # --- the target's operator --------------------------------------------------------------

    def _backend_operator(self, launch: AccelerateLaunch) -> BaseOperator:
        """The GPU operator that runs one machine (``num_machines == 1``), or whose pod or job the
        several machines share."""
        backend = {**self.backend_kwargs, **self.backend_templates}
        common = {
            "task_id": self.task_id,
            "accelerator": list(self.candidates),
            "gpu_profile": self.gpu_profile,
            "profile_interval": self.profile_interval,
            "do_xcom_push": self.do_xcom_push,
            "execution_timeout": self.execution_timeout,  # a deferred pod or job is bounded by it too
        }
        if self.poll_interval is not None:
            common["poll_interval"] = self.poll_interval
        module = self._target_module()
        arguments = {**common, **backend}
        operator: BaseOperator = module.backend_operator(launch, arguments, self.env, capacity=self.capacity)
        return operator

    def _target_module(self) -> Any:
        """Where the target's machines are made; only the target's provider is imported."""
        import importlib

        return importlib.import_module(f"airflow_gpu.operators.accelerate_{self.target}")

    # --- running ----------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        launch = self.launch
        if self.target == "local":
            from airflow_gpu.operators.accelerate_local import LocalTraining

            self._runner = LocalTraining(
                launch, self.env, gpu_profile=self.gpu_profile, interval=self.profile_interval, log=self.log
            )
            return self._runner.run(context)
        self._runner = self._make_runner(launch)
        return self._returned(self._runner.run(context))

    def _returned(self, result: Any) -> Any:
        """A success whose result line could not be read returns None with one warning saying why: the
        local launcher and ``GPUBatchOperator`` warn themselves, the pod's or Job's log is read here."""
        if result is None and self.target == "kubernetes" and self.do_xcom_push:
            missing = self._runner.op.result_missing(f"the training ({self.num_machines} machine(s) on Kubernetes)")
            if missing:
                self.log.warning("%s", missing)
        return result

    def _make_runner(self, launch: AccelerateLaunch) -> Any:
        """The target's runner: the GPU operator's own run, or a training Job of several machines."""
        operator = self._backend_operator(launch)
        interval = self.poll_interval if self.poll_interval is not None else 2.0
        return self._target_module().runner(operator, launch, poll_interval=interval, log=self.log)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Back from a deferral (``deferrable=True``): of the target's operator (one machine, or a Batch
        multi-node job), or of a Kubernetes training Job; what deferred takes it from there."""
        if self.target == "local" or next_method == "execute":
            return super().resume_execution(next_method, next_kwargs, context)
        self._runner = self._make_runner(self.launch)
        return self._returned(self._runner.resume_execution(next_method, next_kwargs, context))

    def on_kill(self) -> None:
        """The workload must not run on, billed: the launcher's process group, or the pod, job or Batch job."""
        if self._runner is not None:
            self._runner.on_kill()


def _port(value: int | str) -> int:
    """The rendezvous port, rendered: a whole number from 1 to 65535 (a template renders to a string)."""
    text = str(value).strip()
    if isinstance(value, bool) or not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 65535:
        raise AcceleratorSpecError("main_process_port", value, "not a TCP port", ["1 to 65535"])
    return int(text)


def _parse_time_port(value: int | str) -> int:
    """What the launch is checked with while the DAG is parsed: the port, or for a template (rendered
    only when the task runs) the default, so that the rest of the launch is still checked now."""
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        return 29500
    return _port(value)


def _backend_class(target: str) -> type[BaseOperator]:
    if target == "kubernetes":
        from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

        return GPUKubernetesOperator
    from airflow_gpu.operators.batch import GPUBatchOperator

    return GPUBatchOperator


def _parameters(cls: type) -> frozenset[str]:
    """Every keyword ``cls`` takes, over its classes (Airflow records each ``__init__``'s names)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        names |= set(getattr(vars(klass).get("__init__"), "_BaseOperatorMeta__param_names", ()))
    return frozenset(names)


#: What the launch sets on the target's operator itself.
OWNED = {
    "cmds": "the launch is the command",
    "arguments": "the launch is the command; give the script's arguments as script_args",
    "command": "the launch is the command; give the script's arguments as script_args",
    "accelerator": "give it to AccelerateTrainOperator",
    "gpu_profile": "give it to AccelerateTrainOperator",
    "profile_interval": "give it to AccelerateTrainOperator",
}


def _check_backend_arguments(target: str, backend: Mapping[str, Any], accepted: frozenset[str]) -> None:
    """A typo or an argument the launch owns fails the DAG file, naming it."""
    for name in backend:
        if name in OWNED:
            raise TypeError(f"AccelerateTrainOperator(target={target!r}) sets {name!r} itself: {OWNED[name]}")
    unknown = sorted(set(backend) - accepted)
    if unknown:
        operator = _backend_class(target).__name__
        raise TypeError(f"AccelerateTrainOperator(target={target!r}): {operator} takes no {', '.join(unknown)}")
    if backend.get("image") in (None, "auto"):
        raise AcceleratorSpecError(
            "image", backend.get("image"),
            "a training image must carry torch, accelerate and the training script; 'auto' picks a CUDA "
            "runtime image without accelerate",
            ["'huggingface/accelerate:gpu-release-1.15.0'", "your own training image"],
        )  # fmt: skip


def _batch_capacity(backend: Mapping[str, Any]) -> str | None:
    """On Batch the queues decide the capacity: a spot queue means spot first."""
    queues = backend.get("job_queues")
    if isinstance(queues, Mapping) and "spot" in queues:
        return "spot"
    return None
