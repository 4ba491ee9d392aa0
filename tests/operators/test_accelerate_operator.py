"""``AccelerateTrainOperator``: what a DAG file gets at parse time, and what each target is handed.

No fakes: the operators are built as a DAG file builds them; the pods, Jobs and Batch submissions
are the objects the targets would send, checked against the Kubernetes and AWS Batch documented
shapes (Indexed Job rank from ``JOB_COMPLETION_INDEX``, multi-node ``nodeProperties``).
"""

from __future__ import annotations

import itertools
import os
import shlex
import threading
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_gpu import AcceleratorSpecError
from airflow_gpu.images.selection import ImageError
from airflow_gpu.operators.accelerate import AccelerateTrainOperator
from airflow_gpu.operators.accelerate_batch import MultiNodeBatchOperator
from airflow_gpu.operators.accelerate_kubernetes import ENV_MAIN_ADDRESS
from airflow_gpu.spot.policy import Placement
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.polling import wait_for

SCRIPT = str(Path(__file__).resolve().parents[2] / "dags" / "training" / "tiny_regression.py")
QUEUES = {"spot": "gpu-spot", "on-demand": "gpu-on-demand"}
IMAGE = "huggingface/accelerate:gpu-release-1.15.0"


def train(**kwargs: Any) -> AccelerateTrainOperator:
    if kwargs.get("target", "local") != "local":
        kwargs.setdefault("image", IMAGE)
    return AccelerateTrainOperator(**{"task_id": "train", "training_script": SCRIPT, **kwargs})


def test_the_operator_is_one_task_of_the_dag_whatever_its_target_builds() -> None:
    """The GPU operator built for its checks must not land in the user's DAG or TaskGroup beside it,
    and the DAG must serialize and come back as the scheduler reads it."""
    from airflow.sdk import TaskGroup
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("accelerate_dag", schedule=None) as dag:
        train(target="kubernetes", accelerator="H100:8", num_machines=2, namespace="ml")
        with TaskGroup("sweep"):
            train(task_id="batch", target="batch", accelerator="A10G", num_machines=2, job_queue="gpu-on-demand")
        train(task_id="local", num_processes=2)
    assert sorted(dag.task_ids) == ["local", "sweep.batch", "train"]
    assert sorted(DagSerialization.from_dict(DagSerialization.to_dict(dag)).task_ids) == sorted(dag.task_ids)


@pytest.mark.parametrize(
    ("kwargs", "field", "said"),
    [
        ({"num_machines": 2}, "num_machines", "one machine"),
        ({"target": "kubernetes"}, "accelerator", "needs one"),
        ({"target": "slurm", "accelerator": "L4"}, "target", "unknown target"),
        ({"target": "kubernetes", "accelerator": ["H100:8", "A100:4"]}, "accelerator", "same GPU count"),
        ({"target": "kubernetes", "accelerator": ["A100:8", "V100:8"], "mixed_precision": "bf16"}, "mixed_precision",
         "7.0"),
        ({"target": "batch", "accelerator": "A10G:4", "num_machines": 2, "job_queues": QUEUES}, "num_machines", "Spot"),
        ({"target": "batch", "accelerator": "A10G:4", "capacity": "spot", "job_queue": "q"}, "capacity", "queues"),
        ({"target": "kubernetes", "accelerator": "L4", "image": "auto"}, "image", "without accelerate"),
        ({"training_script": "/no/such/train.py"}, "training_script", "exist"),
    ],
)  # fmt: skip
def test_what_cannot_work_is_refused_at_parse_time(kwargs: dict[str, Any], field: str, said: str) -> None:
    with pytest.raises(AcceleratorSpecError) as caught:
        train(**kwargs)
    assert caught.value.field == field and said in str(caught.value)


def test_the_backends_own_checks_run_at_parse_time_too() -> None:
    """An image that cannot run on the nodes' driver fails the DAG file, as on GPUKubernetesOperator."""
    with pytest.raises(ImageError, match="driver 535.54.03 supports CUDA <= 12.2"):
        train(target="kubernetes", accelerator="H100:8", image="pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime",
              driver_version="535.54.03")  # fmt: skip
    with pytest.raises(TypeError, match="cluster"):
        train(namespace="ml")  # local runs on the worker: no cluster arguments to ignore silently
    with pytest.raises(TypeError, match="GPUKubernetesOperator takes no namepsace"):
        train(target="kubernetes", accelerator="L4", namepsace="ml")
    with pytest.raises(TypeError, match="sets 'cmds' itself"):
        train(target="kubernetes", accelerator="L4", cmds=["python", "train.py"])
    with pytest.raises(TypeError, match="its own multi-node job definition"):
        train(target="batch", accelerator="A10G", num_machines=2, job_queue="q", job_definition="mine:3")


def test_one_kubernetes_machine_is_a_gpu_pod_running_accelerate_launch() -> None:
    op = train(
        target="kubernetes", accelerator="L4:2", env={"WANDB_MODE": "offline"}, namespace="ml", capacity="on-demand",
        script_args=["--epochs", "3"], gpu_profile=False,
    )  # fmt: skip
    inner = op._backend_operator(op.launch)
    pod = inner.build_pod_request_obj(dry_run=True)
    container = pod.spec.containers[0]
    assert container.command[:2] == ["python3", "-c"]  # finds accelerate without a login shell (find_accelerate)
    assert container.command[3:5] == ["accelerate", "launch"] and container.command[-3:] == [SCRIPT, "--epochs", "3"]
    assert container.resources.limits["nvidia.com/gpu"] == "2" and pod.metadata.namespace == "ml"
    assert {e.name: e.value for e in container.env}["WANDB_MODE"] == "offline"
    assert inner.do_xcom_push is False  # the result line is read; no KPO sidecar in a training pod


def test_several_kubernetes_machines_take_rank_and_main_address_from_the_pod() -> None:
    op = train(target="kubernetes", accelerator="H100:8", num_machines=2, gpu_profile=False)
    inner = op._backend_operator(op.launch)
    shell, flag, script = inner.cmds
    assert (shell, flag) == ("/bin/sh", "-c")
    argv = shlex.split(script.replace('"$JOB_COMPLETION_INDEX"', "RANK").replace(f'"${ENV_MAIN_ADDRESS}"', "MAIN"))
    assert argv[:3] == ["exec", "python3", "-c"] and argv[4:6] == ["accelerate", "launch"]
    flags = {a: b for a, b in itertools.pairwise(argv) if a.startswith("--") and not b.startswith("--")}
    assert flags["--num_processes"] == "16" and flags["--num_machines"] == "2"
    assert flags["--machine_rank"] == "RANK" and flags["--main_process_ip"] == "MAIN"


def test_a_templated_port_is_rendered_into_the_launch_and_checked_then() -> None:
    """A port from the run's conf or params (the soak gives each run its own) reaches ``--main_process_port``
    once rendered; what renders to no port fails the task naming the field, as a bad number fails the parse."""
    from jinja2 import Environment

    op = train(target="kubernetes", accelerator="H100:8", num_machines=2, gpu_profile=False,
               main_process_port="{{ params.port }}")  # fmt: skip
    op.render_template_fields({"params": {"port": 29611}}, jinja_env=Environment())
    script = op._backend_operator(op.launch).cmds[2]
    argv = shlex.split(script.replace('"$JOB_COMPLETION_INDEX"', "RANK").replace(f'"${ENV_MAIN_ADDRESS}"', "MAIN"))
    assert dict(itertools.pairwise(argv))["--main_process_port"] == "29611"
    op.main_process_port = "{{ params.port }}"
    op.render_template_fields({"params": {"port": "http"}}, jinja_env=Environment())
    with pytest.raises(AcceleratorSpecError, match="main_process_port") as caught:
        op.execute({})  # the launch is built from the rendered fields first
    assert caught.value.field == "main_process_port" and "1 to 65535" in str(caught.value)
    for bad in (0, 70000, "29x", "2\u00b2", True):  # "2²" is a digit to str.isdigit, not to int()
        with pytest.raises(AcceleratorSpecError, match="not a TCP port"):
            train(target="kubernetes", accelerator="H100:8", num_machines=2, main_process_port=bad)


def test_several_batch_machines_are_a_multi_node_job_on_demand() -> None:
    op = train(target="batch", accelerator="A10G:4", num_machines=2, job_queue="gpu-on-demand", gpu_profile=False)
    inner = op._backend_operator(op.launch)
    assert isinstance(inner, MultiNodeBatchOperator) and inner.num_nodes == 2
    definition = inner._job_definition({"type": "container", "containerProperties": {"image": "img"}})
    assert definition["type"] == "multinode" and "containerProperties" not in definition
    nodes = definition["nodeProperties"]
    assert nodes["numNodes"] == 2 and nodes["mainNode"] == 0
    assert nodes["nodeRangeProperties"] == [{"targetNodes": "0:", "container": {"image": "img"}}]
    overrides = inner._submission_overrides(Placement(0, "on-demand"))
    assert set(overrides) == {"nodeOverrides"}  # SubmitJob refuses containerOverrides for a multi-node job
    node = overrides["nodeOverrides"]["nodePropertyOverrides"][0]
    assert node["targetNodes"] == "0:" and "$AWS_BATCH_JOB_NODE_INDEX" in node["containerOverrides"]["command"][2]
    assert "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS" in node["containerOverrides"]["command"][2]


def test_a_mapped_training_expands_over_its_arguments_and_the_targets() -> None:
    """``.partial()`` takes the target's arguments (Airflow checks names against ``__init__``), and
    ``backend_args`` maps over them; the DAG's ``default_args`` reach the target's operator too."""
    with DAG("mapped_training", schedule=None, default_args={"namespace": "ml", "retries": 2}) as dag:
        AccelerateTrainOperator.partial(task_id="sweep", training_script=SCRIPT, num_processes=2).expand(
            script_args=[["--lr", "0.1"], ["--lr", "0.01"]]
        )
        shards = AccelerateTrainOperator.partial(
            task_id="shards", target="kubernetes", training_script=SCRIPT, accelerator="L4", image=IMAGE
        ).expand(backend_args=[{"labels": {"shard": "0"}}, {"labels": {"shard": "1"}}])
        single = train(task_id="single", target="kubernetes", accelerator="L4")
    assert sorted(dag.task_ids) == ["shards", "single", "sweep"]
    assert shards.partial_kwargs["partial_backend_args"] == {"image": IMAGE}
    assert single.backend_kwargs["namespace"] == "ml" and single.retries == 2


class Ti:
    """Airflow's task instance as far as the local target uses it: XCom (a boundary we own)."""

    dag_id, task_id, run_id, try_number, map_index = "accelerate_dag", "train", "manual__1", 1, -1

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


@pytest.mark.slow  # a real accelerate launch
def test_a_failing_script_fails_the_task_with_its_last_lines(tmp_path: Path) -> None:
    """A real ``accelerate launch --cpu``; the failure names the exit code and shows the traceback's end."""
    script = tmp_path / "broken.py"
    script.write_text("print('loading data', flush=True)\nraise SystemExit('no such dataset: s3://missing')\n")
    op = AccelerateTrainOperator(task_id="train", training_script=str(script))
    with pytest.raises(AirflowException, match=r"exited with code 1(.|\n)*no such dataset: s3://missing"):
        op.execute({"ti": Ti()})  # type: ignore[arg-type]


@pytest.mark.slow  # a real accelerate launch
def test_on_kill_stops_the_launcher_and_every_rank_it_started(tmp_path: Path) -> None:
    """Marking the task failed must not leave a rank (or its children) running, billed: two ranks
    through torch's elastic agent, which starts each rank in a session of its own."""
    script = tmp_path / "long.py"
    script.write_text(
        "import os, subprocess, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"pids = os.path.join({str(tmp_path)!r}, 'pids-' + os.environ['RANK'])\n"
        "open(pids, 'w').write(f'{os.getpid()} {child.pid}')\n"
        "print('training', flush=True)\n"
        "time.sleep(300)\n"  # a rank that trains until it is killed: the kill is under test
    )
    op = AccelerateTrainOperator(task_id="train", training_script=str(script), num_processes=2, main_process_port=29561)
    errors: list[BaseException] = []

    def execute() -> None:
        try:
            op.execute({"ti": Ti()})  # type: ignore[arg-type]
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=execute)
    thread.start()
    files = wait_for(lambda: len(list(tmp_path.glob("pids-*"))) == 2 and list(tmp_path.glob("pids-*")), 90, "2 ranks")
    pids = [int(pid) for f in files for pid in wait_for(lambda f=f: f.read_text().split() or None, 10, "pids")]
    assert all(os.getsid(pid) != os.getsid(op._runner.process.pid) for pid in pids[::2])  # the ranks left the group
    op.on_kill()
    thread.join(timeout=90)
    assert not thread.is_alive() and errors and "killed" in str(errors[0])
    assert wait_for(lambda: not any(running(pid) for pid in pids), 10, "the ranks and their children to be gone")


def running(pid: int) -> bool:
    """Whether ``pid`` still runs: an exited process waiting to be reaped (a zombie) does not."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.slow
def test_several_batch_nodes_on_a_spot_queue_fail_before_anything_is_submitted(
    aws_default_connection: BatchEmulator,
) -> None:
    """AWS leaves a multi-node job on Spot-only compute environments RUNNABLE for ever (the Batch
    User Guide: not supported on Spot): a single ``job_queue`` hides that at parse time, so the
    task reads the queue's compute environments and fails first."""
    op = train(target="batch", accelerator="A10G", num_machines=2, job_queue="gpu-spot", poll_interval=0.2)
    with pytest.raises(AirflowFailException, match="gpu-spot is Spot only"):
        op.execute({"ti": Ti(), "run_id": "r", "task_state_store": None})  # type: ignore[arg-type]
    assert aws_default_connection.jobs() == []


# --- the local target and the worker's GPUs ------------------------------------------------------


def worker_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, count: int) -> None:
    """This worker as the NVIDIA container toolkit leaves it: ``count`` emulated L4s behind the
    driver's ``nvidia-smi`` (none: no ``nvidia-smi`` at all). No driver here, so NVML finds none."""
    from airflow_gpu.testing import gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    bare = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())
    if not count:
        monkeypatch.setenv("PATH", bare)
        return
    env = gpus.install(gpus.devices("L4", list(range(count)), "worker"), tmp_path / "gpus")
    monkeypatch.setenv("PATH", env[gpus.SMI_DIR_ENV] + os.pathsep + bare)


def test_a_gpu_spec_is_refused_on_a_worker_without_gpus_never_trained_on_cpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The spec asked for an L4: hours of CPU training in its place is not what the DAG said. The
    refusal comes before anything starts, and says what the worker sees and what to do instead."""
    worker_with(monkeypatch, tmp_path, 0)
    op = train(accelerator="L4")
    with pytest.raises(AirflowFailException) as refused:
        op.execute({"ti": Ti()})  # type: ignore[arg-type]
    said = str(refused.value)
    assert "accelerator L4 asks for 1 GPU(s)" in said and "can use 0" in said and "no NVIDIA driver" in said
    assert "target='kubernetes'" in said and "target='batch'" in said and "accelerator=None" in said
    assert op._runner.process is None  # no launcher was started


def test_gpus_hidden_by_cuda_visible_devices_do_not_count(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two GPUs in the machine, one of them given to this worker: a spec of two is refused, naming both."""
    worker_with(monkeypatch, tmp_path, 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    op = train(accelerator="L4:2")
    seen = r"can use 1: nvidia-smi -L lists 2 GPU\(s\), CUDA_VISIBLE_DEVICES='1'"
    with pytest.raises(AirflowFailException, match=seen):
        op.execute({"ti": Ti()})  # type: ignore[arg-type]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # CUDA reads an empty list as no device
    with pytest.raises(AirflowFailException, match=r"can use 0"):
        train(accelerator="L4").execute({"ti": Ti()})  # type: ignore[arg-type]


def test_a_worker_with_the_gpus_asked_for_launches_on_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from airflow_gpu.operators.accelerate_local import LocalTraining

    worker_with(monkeypatch, tmp_path, 2)
    op = train(accelerator="L4:2")
    local = LocalTraining(op.launch, {}, gpu_profile=False, interval=1.0, log=op.log)
    prepared = local._prepared()
    assert prepared.gpus_per_machine == 2 and "--multi_gpu" in prepared.argv() and "--cpu" not in prepared.argv()
    assert prepared.environment() == {}  # not ACCELERATE_USE_CPU
