"""The user's command, wrapped so that it runs under the profiling entrypoint in any image.

The image does not have this package, so the command carries it: ``wrap`` returns
``/bin/sh -c SCRIPT airflow-gpu-profile COMMAND...``, where SCRIPT holds the shipped modules'
sources (zlib, base85) and a bootstrap that puts them into ``sys.modules`` from memory (no file
is written into the container) and calls ``entrypoint.main``. An image without ``python3`` runs
the command unprofiled, after one line on standard error saying so; so does one whose ``python3``
is older than 3.8 (the bootstrap checks, in syntax any Python 3 parses).

``wrap_short`` is the same with the modules in the environment (AWS Batch), and ``wrap_python``
starts that bootstrap with ``python3`` itself, for an image without ``/bin/sh`` (distroless).

The whole wrapped command stays well under the 30 KiB of an AWS Batch ``SubmitJob`` request
(``MAX_WRAPPED_BYTES``). Both ``sh`` and ``python3`` are ``exec``'d, so the entrypoint is the
container's PID 1 and gets the runtime's SIGTERM itself. Runs on the worker: not shipped.
"""

from __future__ import annotations

import ast
import base64
import functools
import io
import json
import tokenize
import zlib
from collections.abc import Sequence
from pathlib import Path

#: The modules the container needs, in dependency order (each imports only those before it).
SHIPPED = ("samples", "summary", "nvidia_smi", "nvml", "marker", "termination", "entrypoint")
#: Those a Kubernetes container only uses (the termination message): AWS Batch's job definition leaves them out.
KUBERNETES_ONLY = ("termination",)
#: The budget for the whole wrapped command (``SubmitJob`` allows 30 KiB for the whole request).
MAX_WRAPPED_BYTES = 24 * 1024
NO_PYTHON = "airflow-gpu: no python3 >= 3.8 in the image; running without the GPU profile"
ARGV0 = "airflow-gpu-profile"

# Runs as ``python3 -c BOOTSTRAP PAYLOAD COMMAND...``. Everything above the version check parses on
# any Python 3; no single quote anywhere (it sits inside single quotes in the shell script).
BOOTSTRAP = """import os, sys
def unprofiled(why):
    sys.stderr.write(why + "\\n")
    sys.stderr.flush()
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    except OSError as error:
        sys.stderr.write("airflow-gpu-profile: %%s: %%s\\n" %% (sys.argv[2], error.strerror))
        sys.exit(127)
if sys.version_info < (3, 8):
    unprofiled("%(no_python)s")
for name in ("AIRFLOW_GPU_PROFILER_BUNDLE", "AIRFLOW_GPU_PROFILER_BOOTSTRAP"):
    os.environ.pop(name, None)
try:
    import base64, importlib.util, json, zlib
    class Shipped:
        sources = json.loads(zlib.decompress(base64.b85decode(sys.argv[1])).decode("utf-8"))
        packages = ("airflow_gpu", "airflow_gpu.profiling")
        def find_spec(self, name, path=None, target=None):
            if name in self.packages or name in self.sources:
                return importlib.util.spec_from_loader(name, self, is_package=name in self.packages)
            return None
        def create_module(self, spec):
            return None
        def exec_module(self, module):
            name = module.__name__
            if name in self.sources:
                path = "<airflow-gpu>/" + name.replace(".", "/") + ".py"
                exec(compile(self.sources[name], path, "exec"), module.__dict__)
    sys.meta_path.insert(0, Shipped())
    from airflow_gpu.profiling.entrypoint import main
except BaseException as error:
    unprofiled("airflow-gpu: the profiler cannot start (%%s: %%s); running without the GPU profile" %% (
        type(error).__name__, error))
sys.exit(main(sys.argv[2:], interval=%(interval)r))
"""

SCRIPT = """command -v python3 >/dev/null 2>&1 && exec python3 -c '%(bootstrap)s' '%(payload)s' "$@"
echo '%(no_python)s' >&2
exec "$@"
"""


#: Where the profiler's code travels when the command must stay short (AWS Batch: ECS refuses
#: container overrides over 8,192 characters, after SubmitJob accepted the job): the job
#: definition's environment, which the bootstrap clears before it starts the command.
NO_PROFILER = (
    "airflow-gpu: no python3 in the image, or no profiler in the job definition; running without the GPU profile"
)
ENV_BUNDLE = "AIRFLOW_GPU_PROFILER_BUNDLE"
ENV_BOOTSTRAP = "AIRFLOW_GPU_PROFILER_BOOTSTRAP"
SCRIPT_FROM_ENV = f"""if [ -n "${ENV_BUNDLE}" ] && command -v python3 >/dev/null 2>&1; then
exec python3 -c "${ENV_BOOTSTRAP}" "${ENV_BUNDLE}" "$@"
fi
echo '{NO_PROFILER}' >&2
exec "$@"
"""


def strip(source: str) -> str:
    """``source`` without comments and docstrings, every line where it was (tracebacks stay true).

    They are most of the bytes; the container needs none of them.
    """
    lines = source.split("\n")  # tokenize's lines, and its rows count from 1
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            lines[row - 1] = lines[row - 1][:col].rstrip()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                end = first.end_lineno or first.lineno
                indent = lines[first.lineno - 1][: first.col_offset]
                lines[first.lineno - 1 : end] = [indent + '""'] + [""] * (end - first.lineno)
    return "\n".join(lines)


@functools.cache
def payload(batch: bool = False) -> str:
    """The shipped modules' sources (stripped) as base85 of zlib of JSON, computed once per process.

    Base85, not base64: a fifth less than base64's third more, and the bundle rides in the job
    definition AWS Batch caps at 24 KiB. Its alphabet has no quote and no backslash, so it sits in
    single quotes in a shell script, in JSON and in an environment variable as it is."""
    here = Path(__file__).parent
    shipped = [name for name in SHIPPED if not (batch and name in KUBERNETES_ONLY)]
    sources = {f"airflow_gpu.profiling.{name}": strip((here / f"{name}.py").read_text()) for name in shipped}
    packed = zlib.compress(json.dumps(sources, separators=(",", ":")).encode("utf-8"), 9)
    return base64.b85encode(packed).decode("ascii")


def wrap(command: Sequence[str], *, interval: float = 1.0) -> list[str]:
    """``command`` run under the profiling entrypoint, sampling every ``interval`` seconds
    (``AIRFLOW_GPU_PROFILE_INTERVAL`` in the container's environment takes precedence)."""
    if isinstance(command, str) or not command:
        raise ValueError("wrap() needs the command as a non-empty list of arguments")
    if not interval > 0:
        raise ValueError(f"interval must be positive, got {interval}")
    bootstrap = BOOTSTRAP % {"no_python": NO_PYTHON, "interval": float(interval)}
    script = SCRIPT % {"bootstrap": bootstrap, "payload": payload(), "no_python": NO_PYTHON}
    return ["/bin/sh", "-c", script, ARGV0, *command]


def environment(batch: bool = False) -> dict[str, str]:
    """The variables ``wrap_short`` needs in the container: the bootstrap and the shipped modules
    (``batch``: without ``KUBERNETES_ONLY``, for the job definition AWS Batch caps at 24 KiB).

    The interval is left to ``AIRFLOW_GPU_PROFILE_INTERVAL`` so that one registered job definition
    serves every interval.
    """
    return {ENV_BOOTSTRAP: BOOTSTRAP % {"no_python": NO_PYTHON, "interval": None}, ENV_BUNDLE: payload(batch)}


#: ``wrap_python``'s program: the bootstrap from the environment, run by python3 with no shell between.
#: ``sys.argv`` is ``["-c", COMMAND...]``; the bootstrap wants ``[_, PAYLOAD, COMMAND...]``.
LOADER_FROM_ENV = f"""import os, sys
bundle, bootstrap = os.environ.get("{ENV_BUNDLE}"), os.environ.get("{ENV_BOOTSTRAP}")
if not (bundle and bootstrap):
    sys.stderr.write("{NO_PROFILER}\\n")
    sys.stderr.flush()
    os.execvp(sys.argv[1], sys.argv[1:])
sys.argv[1:1] = [bundle]
exec(compile(bootstrap, "<airflow-gpu-bootstrap>", "exec"))
"""
#: The programs each wrapper form starts first: the one an image must have for the form to start.
SHELL, PYTHON = "/bin/sh", "python3"


def wrap_python(command: Sequence[str]) -> list[str]:
    """``command`` under the profiler in the environment (``environment()``), started by ``python3``
    itself: for an image without ``/bin/sh`` (distroless), where ``wrap_short`` cannot start."""
    if isinstance(command, str) or not command:
        raise ValueError("wrap_python() needs the command as a non-empty list of arguments")
    return [PYTHON, "-c", LOADER_FROM_ENV, *command]


def wrap_short(command: Sequence[str]) -> list[str]:
    """``command`` under the profiler whose code is in the environment (``environment()``): a few
    hundred bytes; without those variables, or without python3, the command runs unprofiled."""
    if isinstance(command, str) or not command:
        raise ValueError("wrap_short() needs the command as a non-empty list of arguments")
    return [SHELL, "-c", SCRIPT_FROM_ENV, ARGV0, *command]
