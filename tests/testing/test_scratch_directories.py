"""What the emulators leave in the host's temporary directory: nothing once they are done.

A user's CI runs these emulators through the pytest plugin on every push. This suite had left some
30,000 empty ``emulated-images-*`` directories (one per emulator's image set, made whether used or
not), 5,000 ``batch-emulator-*`` work directories and 2,000 ``torchelastic_*`` log directories of
torchrun in ``/tmp``. A container's ``/tmp`` is its own and goes with it; the emulators' containers
are processes here, so each gets a ``TMPDIR`` of its own that goes with its pod or the Batch emulator.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest
from kubernetes import client, config

from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.images import Image, ImageSet
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from tests.testing.batch.api import register
from tests.testing.kubernetes.conftest import pod_manifest

pytestmark = pytest.mark.slow  # a Batch emulator and a Kubernetes one, each with a process


def test_an_image_set_makes_its_directory_only_when_it_needs_one_and_removes_it() -> None:
    images = ImageSet({"img": Image(files={"/opt/run.sh": "#!/bin/sh\necho hi\n"}), "bare": Image()})
    assert images.argv("bare", ["true"]) == ["true"]
    assert "_root" not in vars(images)  # made when first needed (cached there): most sets never place a file
    placed = Path(images.argv("img", ["/opt/run.sh"])[0])
    root = images._root
    assert placed.is_file() and placed.is_relative_to(root) and root.name.startswith("emulated-images-")
    del images
    gc.collect()
    assert not root.exists()


def test_a_pods_processes_get_a_tmpdir_of_their_own_that_goes_with_the_pod(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    script = 'echo "$TMPDIR"; mkdir "$TMPDIR/torchelastic_x"; ls -d "$TMPDIR"/torchelastic_x'
    core.create_namespaced_pod("default", pod_manifest("scratch", ["sh", "-c", script]))
    wait_for(lambda: core.read_namespaced_pod("scratch", "default").status.phase == "Succeeded", 30, "the pod")
    log = core.read_namespaced_pod_log("scratch", "default", _preload_content=False).data.decode().split()
    tmpdir = Path(log[0])
    assert log[1] == f"{tmpdir}/torchelastic_x" and not tmpdir.is_relative_to("/tmp/torchelastic_x")
    assert tmpdir.parent.name == "tmp" and tmpdir.name == "base"  # the container's own, in its pod's directory
    core.delete_namespaced_pod("scratch", "default", grace_period_seconds=0)
    wait_for(lambda: not tmpdir.exists(), 30, "the pod's scratch to go with it")


def test_a_batch_job_gets_a_tmpdir_of_its_own_and_the_emulator_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "tmpdir.txt"
    with BatchEmulator(stop_timeout=1) as emulator:
        workdir = Path(emulator.driver.workdir)
        batch = emulator.client("batch")
        command = [sys.executable, "-c", f"import os; open({str(out)!r}, 'w').write(os.environ['TMPDIR'])"]
        definition = register(batch, "scratch", command)
        job_id = batch.submit_job(jobName="scratch", jobQueue="gpu-spot", jobDefinition=definition)["jobId"]
        wait_for(lambda: batch.describe_jobs(jobs=[job_id])["jobs"][0]["status"] == "SUCCEEDED", 60, "the job")
        scratch = Path(out.read_text())
        assert scratch.is_dir() and scratch.name == f"{job_id}-1" and scratch.is_relative_to(workdir)
    assert not workdir.exists()


def test_a_container_that_mounts_a_volume_at_tmp_runs_with_it_as_its_tmp(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """A volume at ``/tmp`` (usual with a read-only root file system, and the restricted profile's advice) hid
    the pod's own directory under the host's ``/tmp`` in the container's mount namespace: its termination
    message file could not be mounted after it, and the container never ran ("ContainerCannotRun"). The
    sources are held open before the first mount now, as runc does; and no ``TMPDIR`` points under it."""
    from airflow_gpu.testing.kubernetes import volumes

    if not volumes.namespaces_available():
        pytest.skip("needs mount namespaces (root)")
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    mounted = {
        "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}],
        "terminationMessagePath": "/dev/termination-log",
    }
    script = 'made=$(mktemp -d) && touch "$made/x" && echo "${TMPDIR:-unset} $made" && echo done > /dev/termination-log'
    core.create_namespaced_pod("default", pod_manifest(
        "tmp-volume", ["sh", "-c", script], container=mounted, volumes=[{"name": "scratch", "emptyDir": {}}],
    ))  # fmt: skip
    ended = ("Succeeded", "Failed")
    wait_for(lambda: core.read_namespaced_pod("tmp-volume", "default").status.phase in ended, 30, "the pod")
    pod = core.read_namespaced_pod("tmp-volume", "default")
    assert pod.status.phase == "Succeeded", pod.status.container_statuses[0].state
    assert pod.status.container_statuses[0].state.terminated.message.strip() == "done"
    tmpdir, made = core.read_namespaced_pod_log("tmp-volume", "default", _preload_content=False).data.decode().split()
    assert "kubelet-" not in tmpdir and "kubelet-" not in made  # the host's TMPDIR if any, else the volume at /tmp
