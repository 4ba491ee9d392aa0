"""``GPUKubernetesOperator`` pod building and parse-time checks (no cluster: ``dry_run=True``)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger
from airflow.sdk.exceptions import TaskDeferred
from kubernetes.client import ApiClient
from kubernetes.client import models as k8s

from airflow_gpu import AcceleratorSpecError
from airflow_gpu.images.selection import ImageError
from airflow_gpu.operators.kubernetes import STATE_ANNOTATION, GPUKubernetesOperator
from airflow_gpu.spot.classifier import Classification, Outcome
from airflow_gpu.spot.policy import SpotPolicy
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator


def build(**kwargs: Any) -> dict[str, Any]:
    operator = GPUKubernetesOperator(task_id="t", name="train", cmds=["true"], **kwargs)
    pod = operator.build_pod_request_obj(dry_run=True)
    serialized: dict[str, Any] = ApiClient().sanitize_for_serialization(pod)
    return serialized


def expressions(pod: dict[str, Any]) -> list[dict[str, Any]]:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return list(terms["nodeSelectorTerms"][0]["matchExpressions"])


@pytest.mark.parametrize(
    ("accelerator", "resource", "image_prefix"),
    [
        ("H100:8", "nvidia.com/gpu", "pytorch/pytorch:"),
        ("A100-80GB-MIG-3g.40gb:2", "nvidia.com/mig-3g.40gb", "pytorch/pytorch:"),
        ("MI300X:8", "amd.com/gpu", "rocm/pytorch:"),
        ("trn2:16", "aws.amazon.com/neuron", "763104351884.dkr.ecr.us-east-2.amazonaws.com/pytorch-training-neuronx:"),
    ],
)
def test_every_vendor(accelerator: str, resource: str, image_prefix: str) -> None:
    pod = build(accelerator=accelerator, cpu=8, memory="64Gi")
    container = pod["spec"]["containers"][0]
    count = accelerator.split(":")[1] if ":" in accelerator else "1"
    assert container["resources"]["limits"][resource] == count
    assert container["resources"]["requests"]["cpu"] == "8"
    assert container["image"].startswith(image_prefix)
    assert {v["name"]: v for v in pod["spec"]["volumes"]}["dshm"]["emptyDir"]["medium"] == "Memory"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["AIRFLOW_GPU_ACCELERATOR"] and env["AIRFLOW_GPU_ATTEMPT"] == "1"
    assert env["AIRFLOW_GPU_SPOT_NOTICE_FILE"].endswith("/spot-notice")
    assert container["lifecycle"]["preStop"]["exec"]["command"][:2] == ["/bin/sh", "-c"]
    assert pod["spec"]["terminationGracePeriodSeconds"] == SpotPolicy().grace_period_seconds


@pytest.mark.parametrize(
    ("scheme", "key"),
    [("nvidia-gfd", "nvidia.com/gpu.product"), ("gke", "cloud.google.com/gke-accelerator"),
     ("karpenter", "karpenter.k8s.aws/instance-gpu-name")],
)  # fmt: skip
def test_label_schemes_and_capacity(scheme: str, key: str) -> None:
    pod = build(accelerator="L4:2", node_label_scheme=scheme, capacity="spot")
    assert expressions(pod)[0]["key"] == key
    assert {t["key"] for t in pod["spec"]["tolerations"]} >= {"nvidia.com/gpu", "cloud.google.com/gke-spot"}
    assert pod["metadata"]["labels"]["airflow-gpu/capacity"] == "spot"


def test_user_arguments_add_to_the_gpu_ones_and_win_where_both_set_a_key() -> None:
    """A user's toleration keeps the GPU and spot tolerations, a user's volume keeps ``/dev/shm``, a
    user's node affinity is required together with the GPU's (behaviour 11 of issue 12)."""
    resources = k8s.V1ResourceRequirements(limits={"memory": "1Gi"}, requests={"ephemeral-storage": "10Gi"})
    pod = build(
        accelerator="H100:8", capacity="spot", container_resources=resources, termination_grace_period=5,
        tolerations=[k8s.V1Toleration(key="dedicated", operator="Exists")],
        volumes=[k8s.V1Volume(name="data", empty_dir=k8s.V1EmptyDirVolumeSource())],
        volume_mounts=[k8s.V1VolumeMount(name="data", mount_path="/data")],
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["mine"]}]}]}}},
    )  # fmt: skip
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8", "memory": "1Gi"}  # the user's memory wins
    assert container["resources"]["requests"]["ephemeral-storage"] == "10Gi"
    keys = [t["key"] for t in pod["spec"]["tolerations"]]
    assert "nvidia.com/gpu" in keys and "dedicated" in keys and any("spot" in k or "capacity" in k for k in keys)
    assert {v["name"] for v in pod["spec"]["volumes"]} == {"dshm", "data"}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/dev/shm", "/data"}
    required = {e["key"] for e in expressions(pod)}
    assert "pool" in required and "nvidia.com/gpu.product" in required
    assert pod["spec"]["terminationGracePeriodSeconds"] == 5


def test_where_both_set_the_same_key_the_user_wins() -> None:
    pod = build(
        accelerator="H100:8",
        volumes=[k8s.V1Volume(name="dshm", empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit="1Gi"))],
        tolerations=[k8s.V1Toleration(key="nvidia.com/gpu", operator="Equal", value="yes", effect="NoSchedule")],
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["mine"]}]}]}}},
    )  # fmt: skip
    assert [v["emptyDir"].get("sizeLimit") for v in pod["spec"]["volumes"] if v["name"] == "dshm"] == ["1Gi"]
    gpu = [t for t in pod["spec"]["tolerations"] if t["key"] == "nvidia.com/gpu"]
    assert gpu == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]
    products = [e for e in expressions(pod) if e["key"] == "nvidia.com/gpu.product"]
    assert products == [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["mine"]}]


def test_cpu_and_memory_are_templated_and_translated_after_rendering() -> None:
    """Behaviour 10: a template is rendered before the spec translation (no parse-time check then)."""
    from jinja2 import Environment

    operator = GPUKubernetesOperator(task_id="t", name="train", cmds=["true"], accelerator="L4", memory="{{ mem }}")
    operator.render_template_fields({"mem": "20Gi"}, jinja_env=Environment())  # type: ignore[arg-type]
    pod = ApiClient().sanitize_for_serialization(operator.build_pod_request_obj(dry_run=True))
    assert pod["spec"]["containers"][0]["resources"]["limits"]["memory"] == "20Gi"


def test_image_is_selected_or_validated_at_parse_time() -> None:
    assert (
        build(accelerator="V100")["spec"]["containers"][0]["image"] == "pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime"
    )
    driver = build(accelerator="H100", driver_version="535")
    assert driver["spec"]["containers"][0]["image"] == "pytorch/pytorch:2.7.1-cuda11.8-cudnn9-runtime"
    with pytest.raises(ImageError, match="cannot run on B200"):
        GPUKubernetesOperator(task_id="t", accelerator="B200", image="pytorch/pytorch:2.6.0-cuda12.6-cudnn9-runtime")
    with pytest.raises(ImageError, match="cannot run on V100"):  # validated against every candidate
        GPUKubernetesOperator(
            task_id="t", accelerator=["H100", "V100"], image="pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime"
        )


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"accelerator": "H10:8"}, AcceleratorSpecError, "did you mean 'H100'"),
        ({"accelerator": []}, AcceleratorSpecError, "no accelerator given"),
        ({"accelerator": "L4", "capacity": "cheap"}, AcceleratorSpecError, "capacity 'cheap'"),
        ({"accelerator": "A10G", "node_label_scheme": "gke"}, AcceleratorSpecError, "GKE does not offer it"),
        ({"accelerator": "L4", "memory": "lots"}, AcceleratorSpecError, "memory 'lots'"),
        ({"accelerator": "L4", "spot": {"max_interruptions": -1}}, ValueError, "max_interruptions"),
        ({"accelerator": "TPU-v5p:4"}, ImageError, "no TPU images"),
    ],
)
def test_bad_input_fails_when_the_operator_is_built(
    kwargs: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match=fragment):
        GPUKubernetesOperator(task_id="t", **kwargs)


def test_candidates_keep_one_image_each() -> None:
    operator = GPUKubernetesOperator(task_id="t", accelerator=["B200:8", "MI300X:8"])
    assert operator.images[0].startswith("pytorch/pytorch:") and operator.images[1].startswith("rocm/pytorch:")
    assert str(operator.accelerator) == "B200:8"


def test_each_pod_carries_the_resubmission_state() -> None:
    """The state a retry or a resumed deferral reads back: placement, counts and interruptions."""
    operator = GPUKubernetesOperator(task_id="t", name="train", accelerator=["H100:8", "L4:4"], capacity="spot")
    interruption = {"workload": "train-abc", "reason": "TerminationByKubelet"}
    saved = {"version": 1, "candidate": 1, "capacity": "on-demand", "submissions": 3, "interruptions_on_capacity": 0,
             "interruptions": [interruption], "seen": ["train-abc#1"], "workload": None}  # fmt: skip
    operator._restore(saved, "in the test")
    pod = operator.build_pod_request_obj(dry_run=True)
    state = json.loads(pod.metadata.annotations[STATE_ANNOTATION])
    assert state == saved
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["AIRFLOW_GPU_ACCELERATOR"] == "L4:4" and env["AIRFLOW_GPU_ATTEMPT"] == "4"
    assert env["AIRFLOW_GPU_INTERRUPTIONS"] == "1" and env["AIRFLOW_GPU_CAPACITY"] == "on-demand"
    assert pod.spec.containers[0].image == operator.images[1]

    fresh = GPUKubernetesOperator(task_id="t", name="train", accelerator=["H100:8", "L4:4"], capacity="spot")
    fresh._restore_from_pod(pod)  # what a retry does after reattaching to this pod
    assert fresh.spot_run.to_json() == state and str(fresh.accelerator) == "L4:4"


def test_saved_state_for_a_candidate_the_dag_no_longer_has_is_ignored() -> None:
    operator = GPUKubernetesOperator(task_id="t", accelerator="L4")
    operator._restore({"version": 1, "candidate": 2, "capacity": "spot", "submissions": 1}, "in the test")
    assert operator.spot_run.placement.candidate == 0 and operator.spot_run.submissions == 0


def test_deferral_carries_the_state() -> None:
    operator = GPUKubernetesOperator(task_id="t", accelerator="L4", deferrable=True)
    operator._restore({"version": 1, "candidate": 0, "capacity": None, "submissions": 2}, "in the test")
    with pytest.raises(TaskDeferred) as deferred:
        operator.defer(trigger=TimeDeltaTrigger(timedelta(seconds=1)), method_name="trigger_reentry")
    assert deferred.value.kwargs == {"gpu_state": operator.spot_run.to_json()}
    with pytest.raises(TaskDeferred) as other:  # another method's kwargs are left alone
        operator.defer(trigger=TimeDeltaTrigger(timedelta(seconds=1)), method_name="execute_complete")
    assert other.value.kwargs is None


def test_a_mapped_instances_pods_carry_its_map_index_in_every_process() -> None:
    """Behaviour 13: a deferred task resumes in a fresh process that never ran ``execute``; the pod it
    submits next must still carry the map index (and the restored placement). ``Ti`` stands in for
    Airflow's task instance: only its identity is read."""

    class Ti:
        dag_id, task_id, run_id, map_index, try_number = "d", "t", "r", 3, 1

    resumed = GPUKubernetesOperator(task_id="t", name="train", accelerator=["H100:8", "L4:4"], deferrable=True)
    resumed._restore({"version": 1, "candidate": 1, "capacity": None, "submissions": 1}, "carried by the deferral")
    context = {"ti": Ti(), "run_id": "r", "dag": None}
    pod = resumed.build_pod_request_obj(context, dry_run=True)  # type: ignore[arg-type]
    assert pod.metadata.name.startswith("train-3-") and pod.spec.containers[0].image == resumed.images[1]
    assert resumed.name == "train"  # the operator's own field is left as the user gave it


def test_a_profiled_pod_runs_its_command_under_the_profiler() -> None:
    """NVIDIA GPUs are profiled by default: ``cmds`` + ``arguments`` run under the entrypoint."""
    operator = GPUKubernetesOperator(
        task_id="t", name="train", accelerator="H100:2", cmds=["python"], arguments=["train.py", "--epochs", "2"]
    )
    container = ApiClient().sanitize_for_serialization(operator.build_pod_request_obj(dry_run=True))["spec"][
        "containers"
    ][0]
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert container["command"][-4:] == ["python", "train.py", "--epochs", "2"] and "args" not in container
    assert {e["name"]: e["value"] for e in container["env"]}["AIRFLOW_GPU_PROFILE_INTERVAL"] == "1.0"
    assert operator.cmds == ["python"]  # the operator's own fields are never rewritten


@pytest.mark.parametrize(
    ("kwargs", "profiled"),
    [({"accelerator": "MI300X:8"}, False), ({"accelerator": "L4", "gpu_profile": False}, False),
     ({"accelerator": "L4", "cmds": None, "arguments": ["--serve"]}, False), ({"accelerator": "L4"}, True)],
)  # fmt: skip
def test_what_is_not_profiled(kwargs: dict[str, Any], profiled: bool) -> None:
    """AMD has no NVML; ``gpu_profile=False`` opts out; an image's own entrypoint cannot be wrapped."""
    operator = GPUKubernetesOperator(task_id="t", name="train", **{"cmds": ["serve"], **kwargs})
    container = operator.build_pod_request_obj(dry_run=True).spec.containers[0]
    assert (container.command is not None and container.command[:2] == ["/bin/sh", "-c"]) is profiled


def test_a_sampling_interval_that_cannot_work_is_refused_at_parse_time() -> None:
    with pytest.raises(AcceleratorSpecError) as error:
        GPUKubernetesOperator(task_id="t", name="train", accelerator="L4", cmds=["x"], profile_interval=120)
    assert error.value.field == "profile_interval"


def test_a_replacement_pod_keeps_every_text_that_merely_equals_the_first_pods_name(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """With ``random_name_suffix=False`` a pod is named like its task (``train``): the pod the trigger
    creates in its place must keep the ``task_id`` label (reattach and identity fencing read it), the
    command and the volume, and take the new name only as its name and in its spot notice path."""
    from kubernetes import client, config

    from airflow_gpu.operators.kubernetes_deferral import replacement_plan
    from airflow_gpu.triggers.pod_replacement import PodReplacement
    from tests.operators.task_context import Ti

    operator = GPUKubernetesOperator(
        task_id="train", name="train", random_name_suffix=False, accelerator="L4", capacity="spot",
        cmds=["python", "train.py"], gpu_profile=False, deferrable=True, namespace="default",
        config_file=str(kubernetes_emulator.kubeconfig_path),
        volumes=[k8s.V1Volume(name="train", empty_dir=k8s.V1EmptyDirVolumeSource())],
        volume_mounts=[k8s.V1VolumeMount(name="train", mount_path="/train")],
    )  # fmt: skip
    context: Any = {"ti": Ti(task_id="train"), "run_id": "manual__1", "dag": None}
    first = operator.build_pod_request_obj(context)
    assert first.metadata.name == "train"
    plan = json.loads(json.dumps(replacement_plan(operator, context, first.metadata.name)))  # as stored
    replacement = PodReplacement.from_argument(plan, "base", "delete_pod")
    replacement.decide("train", Classification(Outcome.PREEMPTED, "TerminationByKubelet", "", transient=True), None)
    pod = replacement.manifest(replacement.next_name())
    container = pod["spec"]["containers"][0]
    assert pod["metadata"]["name"] == "train-r1"
    assert pod["metadata"]["labels"]["task_id"] == "train"
    assert container["command"] == ["python", "train.py"]
    assert [v["name"] for v in pod["spec"]["volumes"]] == [v.name for v in first.spec.volumes]
    assert {"name": "train", "mountPath": "/train"} in container["volumeMounts"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["AIRFLOW_GPU_SPOT_NOTICE_FILE"] == "/tmp/airflow-gpu/train-r1/spot-notice"
    assert container["lifecycle"]["preStop"]["exec"]["command"][-1].endswith("> /tmp/airflow-gpu/train-r1/spot-notice")
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    created = api.create_namespaced_pod("default", pod)  # what the trigger sends: a valid pod, as the API reads it
    assert created.metadata.labels["task_id"] == "train" and created.spec.containers[0].command == [
        "python",
        "train.py",
    ]


def test_a_plan_stored_by_an_earlier_build_gets_the_first_pods_name_back_where_it_was_not_the_name() -> None:
    """An earlier build put ``NAME_TOKEN`` wherever the pod's name occurred; such a plan can sit in the
    ``trigger`` table across an upgrade: the token outside the name and notice path is the first name."""
    from airflow_gpu.spot.run import SpotRun
    from airflow_gpu.triggers.pod_replacement import NAME_TOKEN, PodReplacement

    notice = f"/tmp/airflow-gpu/{NAME_TOKEN}/spot-notice"
    base = {
        "metadata": {"name": NAME_TOKEN, "labels": {"task_id": NAME_TOKEN}},
        "spec": {"containers": [{"name": "base", "command": ["python", f"{NAME_TOKEN}.py"],
                                 "env": [{"name": "AIRFLOW_GPU_SPOT_NOTICE_FILE", "value": notice}]}]},
    }  # fmt: skip
    policy = SpotPolicy()
    plan = {
        "policy": policy.model_dump(), "candidates": ["L4:1"], "requested_capacity": None,
        "state": SpotRun.start(policy, ["L4:1"], "kubernetes", None).to_json(), "base": base, "base_key": "0/any",
        "deltas": {}, "first_name": "train",
    }  # fmt: skip
    pod = PodReplacement.from_argument(plan, "base", "delete_pod").manifest("train-r1")
    assert pod["metadata"]["name"] == "train-r1" and pod["metadata"]["labels"]["task_id"] == "train"
    assert pod["spec"]["containers"][0]["command"] == ["python", "train.py"]
    assert pod["spec"]["containers"][0]["env"][0]["value"] == "/tmp/airflow-gpu/train-r1/spot-notice"


def emulated(kubernetes_emulator: KubernetesEmulator, **kwargs: Any) -> GPUKubernetesOperator:
    return GPUKubernetesOperator(
        task_id="train", name="train", accelerator="L4", cmds=["sleep", "600"], gpu_profile=False,
        deferrable=True, namespace="default", kubernetes_conn_id=None,
        config_file=str(kubernetes_emulator.kubeconfig_path), **{"capacity": "spot", **kwargs},
    )  # fmt: skip


def test_a_deferral_that_timed_out_deletes_this_tries_pods(kubernetes_emulator: KubernetesEmulator) -> None:
    """Past ``execution_timeout`` plus KPO's padding Airflow cancels the trigger (no ``on_kill``) and the task
    resumes in ``__fail__``: every pod of this try goes, the trigger's replacements included; another try's
    stays, as its own task instance's."""
    from airflow.sdk.bases.operator import TriggerFailureReason
    from airflow.sdk.exceptions import TaskDeferralTimeout
    from kubernetes import client, config

    from airflow_gpu.testing.polling import wait_for
    from tests.operators.task_context import Ti

    operator = emulated(kubernetes_emulator)
    context: Any = {"ti": Ti(task_id="train", try_number=2), "run_id": "manual__1", "dag": None}
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    for name, try_number in (("train-a", 2), ("train-a-r1", 2), ("train-b", 1)):
        pod = operator.build_pod_request_obj({**context, "ti": Ti(task_id="train", try_number=try_number)})
        pod.metadata.name = name
        api.create_namespaced_pod("default", pod)
    with pytest.raises(TaskDeferralTimeout):
        operator.resume_execution("__fail__", {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, context)
    wait_for(lambda: {p.metadata.name for p in api.list_namespaced_pod("default").items} == {"train-b"}, 30)


def test_the_worker_creates_the_pod_the_trigger_could_not(kubernetes_emulator: KubernetesEmulator) -> None:
    """The trigger recorded an interruption and moved the run on, but the cluster refused the next pod: the
    worker creates it, on the run's placement, and defers on it."""
    from kubernetes import client, config

    from airflow_gpu.triggers.kubernetes import NEXT_KEY, STATE_KEY
    from tests.operators.task_context import Ti

    operator = emulated(kubernetes_emulator)
    context: Any = {"ti": Ti(task_id="train"), "run_id": "manual__1", "dag": None}
    moved = GPUKubernetesOperator(task_id="train", accelerator="L4", capacity="spot")
    moved.spot_run.submitted("train-a")
    moved.spot_run.finish(Classification(Outcome.PREEMPTED, "TerminationByKubelet", "", transient=True))
    moved.spot_run.finish(Classification(Outcome.UNSCHEDULABLE, "Unschedulable", "0/1 nodes"))
    assert moved.spot_run.capacity == "on-demand"
    event = {"status": "error", "name": "train-a", "namespace": "default", "message": "exceeded quota",
             NEXT_KEY: True, STATE_KEY: moved.spot_run.to_json()}  # fmt: skip
    with pytest.raises(TaskDeferred):
        operator.trigger_reentry(context, event)
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    (pod,) = api.list_namespaced_pod("default").items
    assert pod.metadata.labels["airflow-gpu/capacity"] == "on-demand" and pod.metadata.labels["task_id"] == "train"
    assert json.loads(pod.metadata.annotations[STATE_ANNOTATION])["submissions"] == 2


def test_the_pods_the_trigger_created_get_kpos_callbacks_and_startup_events_on_resume(
    kubernetes_emulator: KubernetesEmulator, capfd: pytest.CaptureFixture[str]
) -> None:
    """The trigger replaced the preempted pod ``train`` (and deleted it) by ``train-r1``, which succeeded. KPO
    never saw ``train-r1`` created nor ``train`` end: on resume the user's callbacks get, in KPO's order and
    with KPO's arguments, what they would have had if the worker had replaced the pod, and the new pod's
    events are logged as KPO logs them while a pod starts."""
    from airflow.providers.cncf.kubernetes.callbacks import ExecutionMode, KubernetesPodOperatorCallback
    from kubernetes import client, config

    from airflow_gpu.testing.polling import wait_for
    from airflow_gpu.triggers.kubernetes import STATE_KEY
    from tests.operators.task_context import Ti

    calls: list[tuple[str, str]] = []

    def recorder(hook: str, key: str) -> Any:
        def record(**kwargs: Any) -> None:
            assert kwargs["mode"] is ExecutionMode.SYNC and kwargs["operator"] is operator and kwargs["context"]
            calls.append((hook, kwargs[key].metadata.name))

        return staticmethod(record)

    hooks = {"on_pod_completion": "pod", "on_pod_teardown": "pod", "on_pod_cleanup": "pod",
             "on_pod_manifest_created": "pod_request", "on_pod_creation": "pod"}  # fmt: skip
    recording = type("Recording", (KubernetesPodOperatorCallback,), {h: recorder(h, k) for h, k in hooks.items()})
    operator = GPUKubernetesOperator(
        task_id="train", name="train", accelerator="L4", capacity="on-demand", cmds=["true"], gpu_profile=False,
        deferrable=True, namespace="default", kubernetes_conn_id=None, callbacks=recording,
        config_file=str(kubernetes_emulator.kubeconfig_path),
    )  # fmt: skip
    context: Any = {"ti": Ti(task_id="train"), "run_id": "manual__1", "dag": None}
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    made = operator.build_pod_request_obj(context)
    made.metadata.name = "train-r1"
    api.create_namespaced_pod("default", made)
    wait_for(lambda: api.read_namespaced_pod("train-r1", "default").status.phase == "Succeeded", 30)
    run = GPUKubernetesOperator(task_id="train", accelerator="L4", capacity="on-demand").spot_run
    run.submitted("train")
    deferred = run.to_json()  # what the worker deferred with
    run.finish(Classification(Outcome.PREEMPTED, "TerminationByKubelet", "", transient=True))
    event = {"status": "success", "name": "train-r1", "namespace": "default", STATE_KEY: run.to_json()}
    capfd.readouterr()
    operator.trigger_reentry(context, event, gpu_state=deferred)
    assert calls == [
        ("on_pod_completion", "train"), ("on_pod_teardown", "train"), ("on_pod_cleanup", "train"),
        ("on_pod_manifest_created", "train-r1"), ("on_pod_creation", "train-r1"),
        ("on_pod_completion", "train-r1"), ("on_pod_teardown", "train-r1"), ("on_pod_cleanup", "train-r1"),
    ]  # fmt: skip
    assert "The Pod has an Event: Successfully assigned default/train-r1" in capfd.readouterr().out  # the task log


def _trigger_made(api: Any, operator: GPUKubernetesOperator, context: Any, name: str, command: list[str],
                  submissions: int) -> None:  # fmt: skip
    """A pod of this try as the worker or the trigger made it: its command, and the run's state with its rank."""
    pod = operator.build_pod_request_obj(context)
    pod.metadata.name = name
    pod.spec.containers[0].command = command
    pod.metadata.annotations[STATE_ANNOTATION] = json.dumps({**operator.spot_run.to_json(), "submissions": submissions})
    api.create_namespaced_pod("default", pod)


def test_a_crashed_trigger_leaves_the_running_pod_to_the_retry_that_takes_it_over(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """The trigger replaced the preempted pod ``train-a`` (kept: ``on_finish_action="keep_pod"``) by
    ``train-a-r1``, then crashed: the task resumes in ``__fail__`` with a retry to come. ``train-a-r1`` trains
    on and the retry takes it over (KPO's reattach: the identity in the task state store), with the run's
    state from it; nothing new is created, ``train-a`` is not followed. Before, the store still named the
    ended ``train-a``: the retry took it, found it ended, and started a second pod beside ``train-a-r1``."""
    from airflow.sdk.exceptions import TaskDeferralError
    from kubernetes import client, config

    from airflow_gpu.testing.polling import wait_for
    from tests.operators.task_context import Store, Ti

    store = Store()
    first_try: Any = {"ti": Ti(task_id="train", try_number=1, max_tries=1), "run_id": "manual__1", "dag": None,
                      "task_state_store": store}  # fmt: skip
    operator = emulated(kubernetes_emulator, on_finish_action="keep_pod", capacity="on-demand")
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    _trigger_made(api, operator, first_try, "train-a", ["false"], 0)
    wait_for(lambda: api.read_namespaced_pod("train-a", "default").status.phase == "Failed", 30)
    operator._persist_pod_identity_to_task_state_store(first_try, api.read_namespaced_pod("train-a", "default"))
    _trigger_made(api, operator, first_try, "train-a-r1", ["sleep", "600"], 1)
    with pytest.raises(TaskDeferralError):
        emulated(kubernetes_emulator, on_finish_action="keep_pod", capacity="on-demand").resume_execution(
            "__fail__", {"error": "Trigger failure"}, first_try
        )
    running = {p.metadata.name for p in api.list_namespaced_pod("default").items if p.status.phase != "Failed"}
    assert running == {"train-a-r1"}

    retry = emulated(kubernetes_emulator, on_finish_action="keep_pod", capacity="on-demand")
    second_try = {**first_try, "ti": Ti(task_id="train", try_number=2, max_tries=1)}
    with pytest.raises(TaskDeferred):
        retry.execute(second_try)
    assert retry.pod.metadata.name == "train-a-r1" and retry.spot_run.submissions == 1
    assert {p.metadata.name for p in api.list_namespaced_pod("default").items} <= {"train-a", "train-a-r1"}


@pytest.mark.parametrize("why", ["last_try", "reattach_off"])
def test_a_crashed_trigger_deletes_every_pod_of_the_try_when_no_retry_would_take_one_over(
    kubernetes_emulator: KubernetesEmulator, why: str
) -> None:
    """The trigger crashed and nothing would follow its pods (the task's last try; or KPO's reattach off, so
    the retry starts its own): every pod of this try goes, the trigger's included, as the Batch operator
    stops its jobs; another try's pod stays. Before, they ran on, billed, beside the retry's or for nobody."""
    from airflow.sdk.exceptions import TaskDeferralError
    from kubernetes import client, config

    from airflow_gpu.testing.polling import wait_for
    from tests.operators.task_context import Ti

    retries = 0 if why == "last_try" else 3
    options = {"durable": False} if why == "reattach_off" else {}
    context: Any = {"ti": Ti(task_id="train", try_number=2, max_tries=retries), "run_id": "manual__1", "dag": None}
    operator = emulated(kubernetes_emulator, **options)
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    for name, try_number, submissions in (("train-a", 2, 0), ("train-a-r1", 2, 1), ("train-b", 1, 0)):
        made_by = {**context, "ti": Ti(task_id="train", try_number=try_number)}
        _trigger_made(api, operator, made_by, name, ["sleep", "600"], submissions)
    with pytest.raises(TaskDeferralError):
        operator.resume_execution("__fail__", {"error": "Trigger failure"}, context)
    wait_for(lambda: {p.metadata.name for p in api.list_namespaced_pod("default").items} == {"train-b"}, 30)


def test_the_pod_before_the_one_the_worker_creates_gets_kpos_callbacks(kubernetes_emulator: KubernetesEmulator) -> None:
    """The trigger could not create the next pod and the worker does: the ended pod gets the user's
    ``on_pod_completion``, ``on_pod_teardown`` and ``on_pod_cleanup`` (KPO's calls for a pod it is done with),
    before the new pod's ``on_pod_manifest_created`` and ``on_pod_creation``."""
    from airflow.providers.cncf.kubernetes.callbacks import KubernetesPodOperatorCallback
    from kubernetes import client, config

    from airflow_gpu.testing.polling import wait_for
    from airflow_gpu.triggers.kubernetes import NEXT_KEY, STATE_KEY
    from tests.operators.task_context import Ti

    calls: list[tuple[str, str]] = []

    def recorder(hook: str, key: str) -> Any:
        return staticmethod(lambda **kwargs: calls.append((hook, kwargs[key].metadata.name)))

    hooks = {"on_pod_completion": "pod", "on_pod_teardown": "pod", "on_pod_cleanup": "pod",
             "on_pod_manifest_created": "pod_request", "on_pod_creation": "pod"}  # fmt: skip
    recording = type("Recording", (KubernetesPodOperatorCallback,), {h: recorder(h, k) for h, k in hooks.items()})
    operator = emulated(kubernetes_emulator, callbacks=recording, capacity="on-demand")
    context: Any = {"ti": Ti(task_id="train"), "run_id": "manual__1", "dag": None}
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    _trigger_made(api, operator, context, "train-a", ["false"], 0)
    wait_for(lambda: api.read_namespaced_pod("train-a", "default").status.phase == "Failed", 30)
    moved = GPUKubernetesOperator(task_id="train", accelerator="L4", capacity="on-demand")
    moved.spot_run.submitted("train-a")
    deferred = moved.spot_run.to_json()
    moved.spot_run.finish(Classification(Outcome.PREEMPTED, "TerminationByKubelet", "", transient=True))
    event = {"status": "error", "name": "train-a", "namespace": "default", "message": "exceeded quota",
             NEXT_KEY: True, STATE_KEY: moved.spot_run.to_json()}  # fmt: skip
    with pytest.raises(TaskDeferred):
        operator.trigger_reentry(context, event, gpu_state=deferred)
    created = operator.pod.metadata.name
    assert created != "train-a"
    assert calls == [
        ("on_pod_completion", "train-a"), ("on_pod_teardown", "train-a"), ("on_pod_cleanup", "train-a"),
        ("on_pod_manifest_created", created), ("on_pod_creation", created),
    ]  # fmt: skip
