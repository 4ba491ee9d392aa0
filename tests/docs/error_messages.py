"""The error messages the provider raises at parse or run time, read from its source with ``ast``.

What counts: each ``raise`` of a user-facing exception (``USER_FACING``) with its message, and each
failing ``Decision`` of the spot policy (the run-time failure of both GPU operators). A message's key
is the longest literal fragment of its text (an f-string's placeholders cut it), which stays stable
when the values around it change; a message held in a variable is read from the variable's assignment
in the same function. Sites whose text is made elsewhere (``MADE_ELSEWHERE``) are listed by place, so
that a new one is looked at. docs/troubleshooting.rst must hold every key (tests/docs/test_troubleshooting.py).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROVIDER = Path(__file__).resolve().parents[2] / "provider" / "airflow_gpu"
#: Exceptions a DAG author meets: at parse time (bad arguments, a missing extra) or as the task's failure.
USER_FACING = frozenset({
    "AcceleratorSpecError", "ValueError", "TypeError", "ImportError", "AirflowException", "AirflowFailException",
    "ImageError", "PodLaunchFailedException", "PodLaunchTimeoutException", "ResultError",
})  # fmt: skip
#: Not a DAG's parse or run time, each for a reason.
NOT_SCANNED = (
    "testing/",  # the emulators: their errors are the clouds' APIs', documented in testing.rst
    "cli.py", "reap/",  # the airflow-gpu command: cli.rst
    "plugins/",  # the report pages' URLs
    "profiling/",  # in the container and the report: user input reaches it checked by operators/gpu_profile.py
    "accelerators/catalog.py",  # the shipped catalog's own consistency
    "images/cuda.py",  # version parsing of the shipped catalog
    "triggers/pod_watch.py", "triggers/kill_guard.py", "utils/supervisor_requests.py",  # internal invariants
)  # fmt: skip
#: Raises whose text is not written at the raise: where it is made, which the keys of that place cover.
MADE_ELSEWHERE = {
    "operators/spot_task.py": "spot/policy.py Decision messages (SpotRun.failure_message)",
    "operators/batch_submission.py": "accelerators/batch_job.overrides_too_long, hooks/batch_submit.Withdrawn",
    "operators/accelerate_batch.py": "accelerators/batch_job.overrides_too_long",
    "triggers/kubernetes.py": "KubernetesPodOperator's detect_pod_terminate_early_issues (the pod's own reason)",
    "images/selection.py": "images/selection._no_match and the check of an image reference",
    "utils/mapping.py": "check_success_ratio's ValueError, prefixed with the task id",
}
MIN_KEY = 8


@dataclass(frozen=True)
class Message:
    where: str  # path under provider/airflow_gpu, and line
    exception: str
    template: str | None  # the text with each placeholder as "{}"; None when made elsewhere

    @property
    def key(self) -> str | None:
        if self.template is None:
            return None
        fragments = [f.strip(" :;,.()'\"") for f in self.template.split("{}")]
        longest = max(fragments, key=len)
        return longest if len(longest) >= MIN_KEY else None


def _template(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        return None if left is None and right is None else (left or "{}") + (right or "{}")
    return None


def _assigned(function: ast.AST | None, name: str) -> ast.AST | None:
    """The value first assigned to ``name`` in ``function``."""
    for node in ast.walk(function) if function is not None else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    return None


def _message_argument(call: ast.Call, exception: str) -> ast.AST | None:
    index = 2 if exception == "AcceleratorSpecError" else 0
    return call.args[index] if len(call.args) > index else None


def messages() -> Iterator[Message]:
    for path in sorted(PROVIDER.rglob("*.py")):
        where = path.relative_to(PROVIDER).as_posix()
        if where.startswith(NOT_SCANNED):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for node in ast.walk(tree):
            call, exception = None, ""
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                call, exception = node.exc, ast.unparse(node.exc.func).rsplit(".", 1)[-1]
                if exception not in USER_FACING:
                    continue
                argument = _message_argument(call, exception)
            elif (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) == "Decision"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "fail"
            ):
                call, exception, argument = node, "Decision", node.args[2] if len(node.args) > 2 else None
            else:
                continue
            if isinstance(argument, ast.Name):
                inside = [f for f in functions if f.lineno <= node.lineno <= (f.end_lineno or f.lineno)]
                argument = _assigned(inside[-1] if inside else None, argument.id)
            for text in (argument.body, argument.orelse) if isinstance(argument, ast.IfExp) else (argument,):
                yield Message(f"{where}:{node.lineno}", exception, _template(text))


def literals() -> set[str]:
    """Every string the provider's code writes (adjacent literals joined, as the parser joins them;
    an f-string with ``{}`` for its values), whitespace normalised."""
    found: set[str] = set()
    for path in PROVIDER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = _template(node) if isinstance(node, (ast.Constant, ast.JoinedStr)) else None
            if text:
                found.add(normalised(text))
    return found


def normalised(text: str) -> str:
    return re.sub(r"\s+", " ", text)
