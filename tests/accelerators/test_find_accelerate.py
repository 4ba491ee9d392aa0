"""The launch command finds accelerate in the images the docs recommend, without a login shell.

Each image family is laid out in ``tmp_path`` as its Dockerfile lays it out (``plan`` tests, in
process), and the real command runs in the layout of ``huggingface/accelerate:gpu-release-*``
(accelerate's ``docker/accelerate-gpu/Dockerfile``): the conda base ``/opt/conda/bin`` on PATH,
whose Python has no accelerate; torch and accelerate in ``/opt/conda/envs/accelerate``, activated
only by ``source activate accelerate`` in ``~/.profile``. The interpreters are real venvs; the
``accelerate`` package in them is a stand-in that records how it was started, so no training runs
(the ``slow`` marker is still there: ``tests/programs.py`` counts any ``accelerate launch``).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu.accelerators import find_accelerate
from airflow_gpu.accelerators.accelerate import AccelerateLaunch, finder_source
from airflow_gpu.profiling import bundle

MODULE = "accelerate.commands.accelerate_cli"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The stand-in for accelerate's CLI: records argv, interpreter and environment, exits 0.
FAKE_CLI = """import json, os, sys
with open(os.environ["FAKE_ACCELERATE_RECORD"], "w") as out:
    json.dump({"argv": sys.argv[1:], "python": sys.executable, "prefix": sys.prefix,
               "path": os.environ.get("PATH", ""), "conda_prefix": os.environ.get("CONDA_PREFIX")}, out)
"""
ARGS = ["launch", "--num_processes", "1", "train.py"]


def launch(**kwargs: Any) -> AccelerateLaunch:
    return AccelerateLaunch(**{"training_script": "/app/train.py", "target": "kubernetes", **kwargs})


def add_fake_accelerate(env: Path, script: bool = True) -> None:
    """accelerate in ``env``'s site-packages (and its console script in ``env/bin``, as pip installs it)."""
    (site,) = env.glob("lib/python3*/site-packages")
    package = site / "accelerate" / "commands"
    package.mkdir(parents=True)
    (site / "accelerate" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "accelerate_cli.py").write_text(FAKE_CLI)
    if script:
        console = env / "bin" / "accelerate"
        console.write_text(f"#!{env}/bin/python\nimport runpy\nrunpy.run_module({MODULE!r}, run_name='__main__')\n")
        console.chmod(0o755)


def make_python(where: Path, accelerate: bool = False) -> Path:
    """A real interpreter with its own site-packages at ``where`` (as a conda root or env has)."""
    venv.create(where, symlinks=True, with_pip=False)
    if accelerate:
        add_fake_accelerate(where)
    return where


@dataclass
class Image:
    """An image laid out under a directory: its PATH, HOME, and the Pythons in it."""

    root: Path
    path: str
    home: Path

    def environ(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": self.path,
            "HOME": str(self.home),
            "FAKE_ACCELERATE_RECORD": str(self.root / "record.json"),
            "LANG": "C.UTF-8",
            **extra,
        }

    def run(self, argv: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, env=self.environ(**extra), cwd=self.root, capture_output=True, text=True, timeout=60, check=False
        )

    def record(self) -> dict[str, Any]:
        record: dict[str, Any] = json.loads((self.root / "record.json").read_text())
        return record


def hugging_face_gpu_image(root: Path) -> Image:
    """``huggingface/accelerate:gpu-release-*``: ``ENV PATH /opt/conda/bin:$PATH`` over nvidia/cuda's
    PATH, the ``accelerate`` env under ``/opt/conda/envs``, activated in ``~/.profile`` only."""
    conda = make_python(root / "opt" / "conda")
    env = make_python(conda / "envs" / "accelerate", accelerate=True)
    home = root / "root"
    home.mkdir()
    (home / ".profile").write_text(f'export PATH="{env}/bin:$PATH"\n')  # what `source activate accelerate` does
    return Image(root, f"{conda}/bin:/usr/local/nvidia/bin:/usr/local/cuda/bin:{SYSTEM_PATH}", home)


def plan_in(image: Image, python: Path, *, importable: bool = False, bash: str | None = "/bin/bash") -> Any:
    roots = find_accelerate.roots_of([str(python)], {})
    return find_accelerate.plan(ARGS, image.environ(), str(python / "bin" / "python3"), importable, roots, bash)


# --- per image family: where the command finds accelerate (in process) ---------------------------


def test_hugging_face_gpu_image_runs_the_conda_env_that_only_a_login_shell_activates(tmp_path: Path) -> None:
    image = hugging_face_gpu_image(tmp_path)
    conda, env = tmp_path / "opt" / "conda", tmp_path / "opt" / "conda" / "envs" / "accelerate"
    assert shutil.which("accelerate", path=image.path) is None  # the fault: not on a non-login PATH
    executable, argv, environ, note = plan_in(image, conda)
    assert executable == f"{env}/bin/python" and argv == [executable, "-m", MODULE, *ARGS]
    assert environ["PATH"].split(os.pathsep)[0] == f"{env}/bin" and environ["CONDA_PREFIX"] == str(env)
    assert environ["CONDA_DEFAULT_ENV"] == "accelerate" and str(env) in note


@pytest.mark.parametrize(
    "family, bin_dir",
    [
        ("huggingface/accelerate:cpu-release-* (ENV PATH /opt/venv/bin)", "opt/venv"),
        ("pytorch/pytorch + pip install accelerate (/opt/conda/bin)", "opt/conda"),
        ("nvcr.io/nvidia/pytorch + pip install accelerate (/usr/local/bin)", "usr/local"),
    ],
)
def test_accelerate_on_path_runs_as_a_plain_accelerate_launch_always_did(
    tmp_path: Path, family: str, bin_dir: str
) -> None:
    (tmp_path / bin_dir / "bin").mkdir(parents=True)
    script = tmp_path / bin_dir / "bin" / "accelerate"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    image = Image(tmp_path, f"{tmp_path / bin_dir}/bin:{SYSTEM_PATH}", tmp_path)
    executable, argv, environ, note = plan_in(image, tmp_path / bin_dir)
    assert (executable, argv, note) == (str(script), ["accelerate", *ARGS], "")
    assert environ == image.environ()  # nothing changed


def test_accelerate_importable_but_its_script_not_on_path_runs_with_python_m(tmp_path: Path) -> None:
    """``pip install --user`` (scripts in ~/.local/bin, not on PATH) in an NGC image, say."""
    image = Image(tmp_path, SYSTEM_PATH, tmp_path)
    executable, argv, _, note = plan_in(image, tmp_path, importable=True)
    assert argv == [executable, "-m", MODULE, *ARGS] and executable.endswith("python3") and "-m" in note


def test_the_env_named_accelerate_comes_first_and_envs_without_it_are_skipped(tmp_path: Path) -> None:
    conda = tmp_path / "conda"
    for name, has in (("a-tools", False), ("accelerate", True), ("b-train", True)):
        bin_dir = conda / "envs" / name / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "python").write_text("")
        (bin_dir / "python").chmod(0o755)
        site = conda / "envs" / name / "lib" / "python3.10" / "site-packages"
        site.mkdir(parents=True)
        if has:
            (site / "accelerate").mkdir()
            (site / "accelerate" / "__init__.py").write_text("")
    image = Image(tmp_path, SYSTEM_PATH, tmp_path)
    assert plan_in(image, conda)[0] == f"{conda}/envs/accelerate/bin/python"
    shutil.rmtree(conda / "envs" / "accelerate")
    assert plan_in(image, conda)[0] == f"{conda}/envs/b-train/bin/python"


def test_conda_dir_and_opt_conda_are_looked_in_beside_the_pythons_own_prefix() -> None:
    roots = find_accelerate.roots_of(["/usr", "/usr"], {"CONDA_DIR": "/srv/conda"})
    assert roots == ["/usr", "/srv/conda", "/opt/conda"]


def test_an_image_set_up_only_in_a_login_shell_is_tried_last_through_bash_l(tmp_path: Path) -> None:
    image = Image(tmp_path, SYSTEM_PATH, tmp_path)
    executable, argv, _, note = plan_in(image, tmp_path)
    assert executable == "/bin/bash" and argv[:3] == ["/bin/bash", "-l", "-c"] and argv[4:] == ["accelerate", *ARGS]
    assert "login shell" in note


def test_without_accelerate_or_bash_the_command_says_where_it_looked(tmp_path: Path) -> None:
    image = Image(tmp_path, SYSTEM_PATH, tmp_path)
    executable, argv, _, note = plan_in(image, tmp_path, bash=None)
    assert (executable, argv) == ("", [])
    assert "accelerate not found" in note and SYSTEM_PATH in note and f"{tmp_path}/envs" in note


# --- the command itself -------------------------------------------------------------------------


def test_the_container_command_starts_python3_with_the_finder_and_the_launch() -> None:
    one = launch(accelerator="L4:2")
    command = one.command('"$JOB_COMPLETION_INDEX"', '"$MAIN"')
    assert command[:3] == ["python3", "-c", finder_source()] and command[3:] == one.argv()
    two = launch(accelerator="H100:8", num_machines=2).command('"$JOB_COMPLETION_INDEX"', '"$MAIN"')
    assert two[:2] == ["/bin/sh", "-c"] and two[2].startswith("exec python3 -c ")
    assert '--machine_rank "$JOB_COMPLETION_INDEX" --main_process_ip "$MAIN"' in two[2]


def test_what_is_shipped_parses_on_any_python3_and_stays_small() -> None:
    """No annotations, f-strings, walrus or ``__future__`` import: the python3 on an image's PATH may
    be older than the Python that has accelerate."""
    source = finder_source()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        assert not isinstance(node, (ast.AnnAssign, ast.JoinedStr, ast.NamedExpr)), ast.dump(node)
        if isinstance(node, ast.arg):
            assert node.annotation is None
        if isinstance(node, ast.FunctionDef):
            assert node.returns is None
        if isinstance(node, ast.ImportFrom):
            assert node.module != "__future__"
    assert len(source) < 5000  # beside the profiler, within a Batch SubmitJob's 30 KiB


# --- run in the emulated image (real processes) -------------------------------------------------


@pytest.mark.slow  # tests/programs.py: an `accelerate launch` (a stand-in here) is a training start
def test_a_plain_accelerate_launch_needs_a_login_shell_in_the_hugging_face_image(tmp_path: Path) -> None:
    """The emulated image is faithful: what ran before this fix is not found, except in ``bash -l``."""
    image = hugging_face_gpu_image(tmp_path)
    argv = launch(accelerator="L4").argv()
    with pytest.raises(FileNotFoundError):
        image.run(argv)
    login = image.run(["/bin/bash", "-lc", 'exec "$@"', "bash", *argv])
    assert login.returncode == 0, login.stderr
    assert image.record()["argv"][:1] == ["launch"]


@pytest.mark.slow
def test_the_launch_runs_in_the_hugging_face_image_without_a_login_shell(tmp_path: Path) -> None:
    image = hugging_face_gpu_image(tmp_path)
    one = launch(accelerator="L4", script_args=("--epochs", "3"))
    done = image.run(one.command('"$JOB_COMPLETION_INDEX"', '"$MAIN"'), HOME=str(tmp_path / "nobody"))
    assert done.returncode == 0, done.stderr
    env = tmp_path / "opt" / "conda" / "envs" / "accelerate"
    got = image.record()
    assert got["argv"] == one.argv()[1:] and got["prefix"] == str(env)
    assert got["path"].split(os.pathsep)[0] == f"{env}/bin" and got["conda_prefix"] == str(env)
    assert "conda environment" in done.stderr


@pytest.mark.slow
def test_each_machine_of_several_gets_its_rank_and_main_address_in_the_hugging_face_image(tmp_path: Path) -> None:
    image = hugging_face_gpu_image(tmp_path)
    two = launch(accelerator="H100:8", num_machines=2)
    done = image.run(two.command('"$JOB_COMPLETION_INDEX"', '"$MAIN"'), JOB_COMPLETION_INDEX="1", MAIN="t-0.t")
    assert done.returncode == 0, done.stderr
    assert image.record()["argv"] == two.argv(machine_rank="1", main_process_ip="t-0.t")[1:]


@pytest.mark.slow
def test_the_profiler_wrapper_runs_the_launch_in_the_hugging_face_image(tmp_path: Path) -> None:
    """The wrapper starts with the base python3 (no accelerate, no torch) and runs the launch."""
    image = hugging_face_gpu_image(tmp_path)
    one = launch(accelerator="L4")
    wrapped = bundle.wrap(one.command('"$JOB_COMPLETION_INDEX"', '"$MAIN"'), interval=0.2)
    done = image.run(wrapped, AIRFLOW_GPU_IMDS="off")  # no spot watcher: this is no EC2 instance
    assert done.returncode == 0, done.stdout + done.stderr
    assert image.record()["argv"] == one.argv()[1:]
    assert "::airflow-gpu-profile::" in done.stdout and '"exit_code":0' in done.stdout  # profiled, not skipped


@pytest.mark.slow
def test_an_image_set_up_only_in_profile_runs_through_the_login_shell(tmp_path: Path) -> None:
    env = make_python(tmp_path / "home" / "venvs" / "train", accelerate=True)
    (tmp_path / "home" / ".profile").write_text(f'export PATH="{env}/bin:$PATH"\n')
    base = make_python(tmp_path / "python")
    image = Image(tmp_path, f"{base}/bin:{SYSTEM_PATH}", tmp_path / "home")
    done = image.run(launch(accelerator="L4").command("0", "main"))
    assert done.returncode == 0, done.stderr
    assert image.record()["prefix"] == str(env) and "login shell" in done.stderr


@pytest.mark.slow
def test_an_image_without_accelerate_fails_as_not_found_saying_where_it_looked(tmp_path: Path) -> None:
    base = make_python(tmp_path / "python")
    image = Image(tmp_path, f"{base}/bin:{SYSTEM_PATH}", tmp_path / "home")
    (tmp_path / "home").mkdir()
    done = image.run(launch(accelerator="L4").command("0", "main"))
    assert done.returncode == 127
    assert "accelerate not found" in done.stderr and f"{base}/envs" in done.stderr


def test_the_finder_module_is_what_is_shipped() -> None:
    """The shipped source is the module's, so the in-process tests above test what the container runs."""
    shipped = ast.parse(finder_source())
    names = {node.name for node in shipped.body if isinstance(node, ast.FunctionDef)}
    assert names == {"conda_environments", "has_accelerate", "quoted", "plan", "roots_of", "main"}


def old_python3(version: str) -> str | None:
    """A ``python<version>`` of pyenv's on this machine that says it is that version, else None."""
    probe = "import sys; print('%d.%d' % sys.version_info[:2])"
    for candidate in sorted(Path("/root/.pyenv/versions").glob(f"{version}.*/bin/python{version}")):
        said = subprocess.run([str(candidate), "-c", probe], capture_output=True, text=True, check=False)
        if said.returncode == 0 and said.stdout.strip() == version:
            return str(candidate)
    return None


@pytest.mark.slow
def test_an_old_python3_on_path_still_finds_the_env_through_conda_dir(tmp_path: Path) -> None:
    """The python3 on an image's PATH may be far older than the one with accelerate (a CentOS 7
    system Python beside a conda env): what is shipped runs there and hands over."""
    found = old_python3("3.6")
    if found is None:
        pytest.skip("no Python 3.6 on this machine")
    image = hugging_face_gpu_image(tmp_path)
    old = tmp_path / "old"
    old.mkdir()
    (old / "python3").symlink_to(found)
    image.path = f"{old}:{SYSTEM_PATH}"
    one = launch(accelerator="L4")
    done = image.run(one.command("0", "main"), CONDA_DIR=str(tmp_path / "opt" / "conda"))
    assert done.returncode == 0, done.stderr
    assert image.record()["prefix"] == str(tmp_path / "opt" / "conda" / "envs" / "accelerate")
