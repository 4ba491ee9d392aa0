"""A container whose image lacks the program its command starts ends as containerd reports it to the kubelet.

The shape is a real cluster's (containerd 1.7, runc 1.1; kubernetes/kubernetes#120331 shows it verbatim): the
container is ``terminated`` with reason ``StartError``, exit code 128, ``startedAt`` the Unix epoch (containerd
never set one) and containerd's message, the kubelet records a ``Failed`` event "Error: <message>", and the pod
of ``restartPolicy: Never`` is ``Failed``. An image declared with an ENTRYPOINT runs it as containerd does:
``command`` replaces it, ``args`` replace the image's Cmd.
"""

from __future__ import annotations

from kubernetes import client

from airflow_gpu.testing.images import Image, distroless
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.testing.kubernetes.conftest import pod_manifest, wait_for

DISTROLESS = "gcr.io/distroless/python3-debian12:nonroot"
STATIC = "gcr.io/distroless/static-debian12:nonroot"


def log(core: client.CoreV1Api, name: str) -> str:
    return str(core.read_namespaced_pod_log(name, "default", _preload_content=False).data.decode()).strip()


def ended(core: client.CoreV1Api, name: str) -> client.V1Pod:
    return wait_for(lambda: (p := core.read_namespaced_pod(name, "default")).status.phase in ("Failed", "Succeeded")
                    and p)  # fmt: skip


def test_a_command_whose_program_the_image_lacks_ends_as_containerd_reports_it(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    kubernetes_emulator.declare_image(DISTROLESS, distroless(entrypoint=["/usr/bin/python3.11"], python=True))
    core.create_namespaced_pod("default", pod_manifest("shell", ["/bin/sh", "-c", "echo hi"],
                                                       container={"image": DISTROLESS}))  # fmt: skip
    pod = ended(core, "shell")
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (128, "StartError")
    assert terminated.message == (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        'failed: unable to start container process: exec: "/bin/sh": stat /bin/sh: no such file or directory: '
        "unknown"
    )
    assert terminated.started_at.year == 1970 and terminated.finished_at.year > 2000
    events = core.list_namespaced_event("default", field_selector="involvedObject.name=shell").items
    failed = [e for e in events if e.reason == "Failed"]
    assert [(e.type, e.message) for e in failed] == [("Warning", f"Error: {terminated.message}")]
    assert not [e for e in events if e.reason == "Started"]


def test_a_name_looked_up_in_path_is_worded_as_runc_words_it(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    kubernetes_emulator.declare_image(STATIC, distroless())
    core.create_namespaced_pod("default", pod_manifest("py", ["python3", "-c", "print(1)"],
                                                       container={"image": STATIC}))  # fmt: skip
    terminated = ended(core, "py").status.container_statuses[0].state.terminated
    assert terminated.reason == "StartError"
    assert terminated.message.endswith('exec: "python3": executable file not found in $PATH: unknown')


def test_a_program_the_image_has_runs_and_sees_only_the_images_programs(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    """python3 runs in the distroless python image; a shell it might look for through PATH is not there."""
    kubernetes_emulator.declare_image(DISTROLESS, distroless(python=True))
    script = "import shutil; print('sh' if shutil.which('sh') else 'no sh', shutil.which('python3') and 'python3')"
    manifest = pod_manifest("ok", ["python3", "-c", script], container={"image": DISTROLESS})
    core.create_namespaced_pod("default", manifest)
    assert ended(core, "ok").status.phase == "Succeeded"
    assert log(core, "ok") == "no sh python3"


def test_args_alone_go_to_the_images_entrypoint(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    kubernetes_emulator.declare_image("team/echo:1", Image(entrypoint=("echo", "entry"), cmd=("default",)))
    manifest = pod_manifest("args", [], container={"image": "team/echo:1", "args": ["given"]})
    del manifest["spec"]["containers"][0]["command"]
    core.create_namespaced_pod("default", manifest)
    assert ended(core, "args").status.phase == "Succeeded"
    assert log(core, "args") == "entry given"
