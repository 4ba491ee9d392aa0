"""Run the ``accelerate`` command from wherever the image installed it, without a login shell (shipped).

This module runs in the container, not on the worker: ``AccelerateLaunch.command()`` ships its
source as ``python3 -c <source> accelerate launch ...``. It uses the standard library only, and
what is shipped parses on any Python 3 (``accelerate.finder_source()`` drops the annotations and
docstrings), because the ``python3`` on PATH need not be the Python that has accelerate.

Why it exists: a container runtime starts the command with no login shell (Kubernetes ``command``,
AWS Batch's CMD after the image's ENTRYPOINT), so nothing in ``~/.profile`` or ``~/.bashrc``
applies. ``huggingface/accelerate:gpu-release-*``, the image the docs recommend, is built by
accelerate's ``docker/accelerate-gpu/Dockerfile``: torch and accelerate go into the conda
environment ``/opt/conda/envs/accelerate``, only the base ``/opt/conda/bin`` is on PATH (its
Python has neither), and ``source activate accelerate`` is appended to ``~/.profile``. A plain
``accelerate launch`` is "not found" there, in a pod and on Batch alike (its ENTRYPOINT, NVIDIA's
``nvidia_entrypoint.sh`` inherited from ``nvidia/cuda``, runs the command with ``exec "$@"``).

Where accelerate is looked for; the first found runs, ``exec``'d (same process, so the runtime's
SIGTERM reaches ``accelerate launch`` itself, as before):

1. ``accelerate`` on PATH: as a plain ``accelerate launch`` always ran (``pytorch/pytorch`` and
   NGC images with accelerate pip-installed, the Hugging Face CPU image's venv, a venv on PATH);
2. the ``python3`` running this: ``python3 -m accelerate.commands.accelerate_cli`` (the console
   script's own entry point; for ``pip install --user`` or a scripts directory not on PATH);
3. a conda environment that is not activated: ``<root>/envs/*`` for each root among this Python's
   prefixes, ``$CONDA_DIR`` and ``/opt/conda`` (an environment named ``accelerate`` first), run with
   its own Python, its ``bin`` first on PATH and ``CONDA_PREFIX``/``CONDA_DEFAULT_ENV`` set, which
   is what activation does that a launch needs (the ranks and tools it starts are found there);
4. a login shell, ``bash -l``, which reads the ``~/.profile`` of the user the container runs as:
   the last resort, for an image that sets its environment up only there, somewhere not listed;
5. nowhere: one line on standard error saying where it looked, exit status 127 (not found).

Every case but the first says on standard error which one ran.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

PROGRAM = "accelerate"
#: What the ``accelerate`` console script runs (``accelerate = accelerate.commands.accelerate_cli:main``).
MODULE = "accelerate.commands.accelerate_cli"
#: Where conda lives when nothing says otherwise (continuumio and the Hugging Face images).
CONDA_ROOTS = ("/opt/conda",)
PREFERRED_ENV = "accelerate"
NOT_FOUND = 127


def conda_environments(roots: list[str]) -> list[str]:
    """The environments under each conda root, the one named ``accelerate`` first, each once."""
    found: list[str] = []
    for root in roots:
        envs = sorted(str(env) for env in Path(root, "envs").glob("*"))
        envs.sort(key=lambda env: Path(env).name != PREFERRED_ENV)
        for env in envs:
            if env not in found:
                found.append(env)
    return found


def has_accelerate(env: str) -> bool:
    """Whether ``env`` has a Python and accelerate in its site-packages (no process started)."""
    packages = list(Path(env, "lib").glob("python3*/site-packages/" + PROGRAM + "/__init__.py"))
    return bool(packages) and os.access(str(Path(env, "bin", "python")), os.X_OK)


def quoted(word: str) -> str:
    """``word`` as one shell word."""
    return "'" + word.replace("'", "'\"'\"'") + "'"


def plan(
    args: list[str], environ: dict[str, str], python: str, importable: bool, roots: list[str], bash: str | None
) -> tuple[str, list[str], dict[str, str], str]:
    """How to run ``accelerate ARGS``: the first of the five ways (module docstring) that applies,
    as (executable, argv, environment, a note for standard error or ""); no executable: not found.

    ``python`` is the interpreter running this, ``importable`` whether it imports accelerate, ``roots``
    the conda installations to look in, ``bash`` the login shell to try last (None: the image has none).
    """
    search = environ.get("PATH", os.defpath)
    on_path = shutil.which(PROGRAM, path=search)
    if on_path:
        return on_path, [PROGRAM, *args], environ, ""
    if importable:
        note = "airflow-gpu: accelerate is not on PATH; running it with " + python + " -m " + MODULE
        return python, [python, "-m", MODULE, *args], environ, note
    for env in conda_environments(roots):
        if has_accelerate(env):
            bin_dir = str(Path(env, "bin"))
            activated = dict(environ)
            activated["PATH"] = bin_dir + os.pathsep + search
            activated["CONDA_PREFIX"] = env
            activated["CONDA_DEFAULT_ENV"] = Path(env).name
            env_python = str(Path(bin_dir, "python"))
            note = (
                "airflow-gpu: accelerate is not on PATH; running it from the conda environment " + env + ", "
                "which only a login shell activates in this image"
            )
            return env_python, [env_python, "-m", MODULE, *args], activated, note
    envs = ", ".join(str(Path(root, "envs")) for root in roots)
    looked = "not on PATH (" + search + "), not importable by " + python + ", in no conda environment (" + envs + ")"
    missing = (
        "airflow-gpu: accelerate not found: " + looked + ", nor on PATH in a login shell; the image needs "
        "accelerate on PATH or importable by its python3 (see the Distributed training docs)"
    )
    if bash is None:
        return "", [], environ, missing
    script = "command -v " + PROGRAM + " >/dev/null 2>&1 || { echo " + quoted(missing) + " >&2; exit 127; }; "
    script += "exec " + PROGRAM + ' "$@"'
    note = "airflow-gpu: accelerate " + looked + "; trying a login shell (bash -l reads ~/.profile)"
    return bash, [bash, "-l", "-c", script, PROGRAM, *args], environ, note


def roots_of(python_prefixes: list[str], environ: dict[str, str]) -> list[str]:
    """The conda roots to look under: this Python's, ``$CONDA_DIR``'s, ``/opt/conda``; each once."""
    roots: list[str] = []
    for root in [*python_prefixes, environ.get("CONDA_DIR", ""), *CONDA_ROOTS]:
        if root and root not in roots:
            roots.append(root)
    return roots


def main() -> None:
    """Find accelerate and ``exec`` it: ``sys.argv`` is ``["-c", "accelerate", ARGS...]``."""
    import importlib.util

    args = sys.argv[1:]
    if args[:1] == [PROGRAM]:
        args = args[1:]
    environ = dict(os.environ)
    importable = importlib.util.find_spec(PROGRAM) is not None
    roots = roots_of([sys.prefix, getattr(sys, "base_prefix", sys.prefix)], environ)
    bash = shutil.which("bash", path=environ.get("PATH", os.defpath))
    if bash is None and os.access("/bin/bash", os.X_OK):
        bash = "/bin/bash"
    executable, argv, env, note = plan(args, environ, sys.executable, importable, roots, bash)
    if note:
        sys.stderr.write(note + "\n")
        sys.stderr.flush()
    if not executable:
        sys.exit(NOT_FOUND)
    try:
        os.execve(executable, argv, env)
    except OSError as error:
        sys.stderr.write("airflow-gpu: " + executable + ": " + str(error.strerror) + "\n")
        sys.exit(NOT_FOUND)


if __name__ == "__main__":
    main()
