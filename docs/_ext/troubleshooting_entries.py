"""The error messages the provider raises at parse or run time, read from its source with ``ast``.

What counts: each ``raise`` of a user-facing exception (``USER_FACING``) with its message, and each
failing ``Decision`` of the spot policy (the run-time failure of both GPU operators). A message's key
is the longest literal fragment of its text (an f-string's placeholders cut it), which stays stable
when the values around it change; a message held in a variable is read from the variable's assignment
in the same function. Sites whose text is made elsewhere (``MADE_ELSEWHERE``) are listed by place, so
that a new one is looked at.

docs/troubleshooting.rst must hold every message, and no entry for a message that is gone: as a Sphinx
extension this fails the docs build (``-W``) on either (``check``); tests/docs/test_troubleshooting.py
asks the same of the scan, and that the scan sees what it must.

An entry is a definition-list term, the message in double backquotes with each value written
``<...>``; it covers a message when the message's text, its placeholders matching any value, is the
whole term.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROVIDER = Path(__file__).resolve().parents[2] / "provider" / "airflow_gpu"
PAGE = Path(__file__).resolve().parents[1] / "troubleshooting.rst"
TERM = re.compile(r"^``(.+)``$", re.MULTILINE)
PLACEHOLDER = re.compile(r"<[^<>]*>")
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


def terms() -> list[str]:
    """The page's entries: its definition-list terms that are a message in double backquotes."""
    return [normalised(t) for t in TERM.findall(PAGE.read_text(encoding="utf-8"))]


def covers(term: str, message: Message) -> bool:
    assert message.template is not None
    pattern = ".+?".join(re.escape(part) for part in normalised(message.template).split("{}"))
    return re.fullmatch(pattern, term, re.DOTALL) is not None


def missing() -> list[str]:
    """The messages the page has no entry for."""
    written = terms()
    return sorted({m.template for m in messages() if m.template is not None and m.key is not None
                   and not any(covers(t, m) for t in written)})  # fmt: skip


def stale() -> list[str]:
    """The entries whose text the code writes nowhere: a message that is gone, or misquoted."""
    written = literals()
    return [
        term for term in terms()
        if not any(max((f.strip() for f in PLACEHOLDER.split(term)), key=len) in text for text in written)
    ]  # fmt: skip


def check(app: Any, env: Any) -> None:
    """``env-check-consistency``: each message without an entry, and each stale entry, is a warning."""
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    for message in missing():
        log.warning("no entry in troubleshooting.rst for the error message %r (add one: cause and fix)", message,
                    location="troubleshooting")  # fmt: skip
    for term in stale():
        log.warning("troubleshooting.rst has an entry for a message the code no longer has: %r", term,
                    location="troubleshooting")  # fmt: skip


def setup(app: Any) -> dict[str, Any]:
    app.connect("env-check-consistency", check)
    return {"parallel_read_safe": True}
