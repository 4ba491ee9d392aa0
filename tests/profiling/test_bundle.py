"""The wrapped command's shape and the shipped modules' promises (standard library only, Python 3.8
syntax, small enough for an AWS Batch request), read from the real sources. No fakes."""

from __future__ import annotations

import ast
import base64
import json
import sys
import zlib
from pathlib import Path

import pytest

from airflow_gpu.profiling import bundle
from airflow_gpu.profiling.bundle import MAX_WRAPPED_BYTES, SHIPPED, payload, strip, wrap
from airflow_gpu.profiling.marker import PROFILE_MARKER

HERE = Path(bundle.__file__).parent


def test_the_wrapped_command_is_sh_running_the_bootstrap_well_under_30_kib() -> None:
    wrapped = wrap(["python", "train.py", "--lr", "3e-4"], interval=0.5)
    assert wrapped[:2] == ["/bin/sh", "-c"] and wrapped[3:] == [
        "airflow-gpu-profile",
        "python",
        "train.py",
        "--lr",
        "3e-4",
    ]
    size = sum(len(arg.encode()) for arg in wrapped)
    assert size < MAX_WRAPPED_BYTES < 30 * 1024
    assert "interval=0.5" in wrapped[2] and "exec python3 -c '" in wrapped[2] and 'exec "$@"' in wrapped[2]
    assert "'" not in bundle.BOOTSTRAP and "'" not in payload()  # both sit inside single quotes
    assert payload() is payload()  # computed once per process
    with pytest.raises(ValueError, match="non-empty list"):
        wrap([])
    with pytest.raises(ValueError, match="non-empty list"):
        wrap("python train.py")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        wrap(["true"], interval=0)


def test_the_payload_holds_every_shipped_module_stripped_line_for_line() -> None:
    sources = json.loads(zlib.decompress(base64.b85decode(payload())))
    assert sorted(sources) == sorted(f"airflow_gpu.profiling.{name}" for name in SHIPPED)
    for name in SHIPPED:
        original = (HERE / f"{name}.py").read_text()
        shipped = sources[f"airflow_gpu.profiling.{name}"]
        assert shipped.count("\n") == original.count("\n")  # a traceback's line numbers stay true
        assert '"""' not in shipped and "# " not in shipped.replace('"# "', "")
        compile(shipped, name, "exec")


def test_strip_keeps_code_that_looks_like_comments_and_docstrings() -> None:
    source = 'def f():\n    """Doc\n    string."""\n\n\nx = "#not a comment"  # a comment\ny = """kept"""\n'
    assert strip(source) == 'def f():\n    ""\n\n\n\nx = "#not a comment"\ny = """kept"""\n'


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_modules_import_only_the_standard_library_and_parse_as_python_3_8(name: str) -> None:
    """The container has a python3 >= 3.8 and nothing of ours: every import must be the standard
    library's, a shipped module's, or ``pynvml`` (imported lazily, optional)."""
    source = (HERE / f"{name}.py").read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    assert "from __future__ import annotations" in source  # annotations are never evaluated on 3.8
    shipped = {f"airflow_gpu.profiling.{n}" for n in SHIPPED} | {"airflow_gpu.profiling"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            continue
        for module in modules:
            assert module.split(".")[0] in sys.stdlib_module_names or module in shipped or module == "__future__", (
                f"{name} imports {module}"
            )
    banned = ("pairwise", "removeprefix", "removesuffix", "slots=True", "kw_only", "zip(strict", "functools.cache")
    assert not [word for word in banned if word in strip(source)]  # in code, not in comments about them


def _run_short(env_update: dict[str, str]) -> tuple[int, str, str]:
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_GPU_")}
    env.update(AIRFLOW_GPU_IMDS="off", **env_update)
    script = "import os; print('ran', 'AIRFLOW_GPU_PROFILER_BUNDLE' in os.environ)"
    done = subprocess.run(bundle.wrap_short([sys.executable, "-c", script]), env=env, capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def test_the_short_wrap_takes_the_profiler_from_the_environment_and_hides_it_from_the_command() -> None:
    """AWS Batch's form: a few hundred bytes of command (ECS caps overrides at 8,192 characters)."""
    assert len(json.dumps(bundle.wrap_short(["python", "train.py"]))) < 1024
    code, out, _ = _run_short(bundle.environment())
    assert code == 0 and out.startswith("ran False\n") and PROFILE_MARKER in out
    code, out, _ = _run_short(bundle.environment(batch=True))  # without the Kubernetes-only modules
    assert code == 0 and out.startswith("ran False\n") and PROFILE_MARKER in out


def test_without_the_environment_or_with_a_broken_profiler_the_command_runs_unprofiled() -> None:
    code, out, err = _run_short({})
    assert (code, out) == (0, "ran False\n") and bundle.NO_PROFILER in err
    code, out, err = _run_short({**bundle.environment(), bundle.ENV_BUNDLE: "not base64 of anything"})
    assert (code, out) == (0, "ran False\n") and "the profiler cannot start" in err
