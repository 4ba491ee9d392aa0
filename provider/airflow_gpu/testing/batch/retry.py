"""AWS Batch's ``retryStrategy`` rules, as the service applies them after a failed attempt.

From the Batch API reference (``EvaluateOnExit``): every condition an entry sets must match; a
pattern matches exactly, or as a prefix when it ends with ``*``; the first matching entry's action
wins; a missing reason or exit code matches only a bare ``*``; with entries but no match the job
is retried; without entries every failure is retried; ``attempts`` (1..10, default 1) bounds the
attempts in all. The emulator applies these rules, and the operator's tests check the strategies
it generates against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

Action = Literal["RETRY", "EXIT"]


def pattern_matches(pattern: str, value: str | None) -> bool:
    """A missing value matches only ``*`` (so the documented catch-all ``onReason: "*"`` catches all)."""
    value = value or ""
    if pattern.endswith("*"):
        return value.startswith(pattern[:-1])
    return value == pattern


def action_after_attempt(
    strategy: Mapping[str, Any] | None,
    *,
    attempts_so_far: int,
    status_reason: str | None,
    reason: str | None,
    exit_code: int | None,
) -> Action:
    """What Batch does after a failed attempt: run another one, or stop with FAILED."""
    strategy = strategy or {}
    if attempts_so_far >= int(strategy.get("attempts") or 1):
        return "EXIT"
    rules = strategy.get("evaluateOnExit") or []
    if not rules:
        return "RETRY"
    code = None if exit_code is None else str(exit_code)
    for rule in rules:
        checks = (("onStatusReason", status_reason), ("onReason", reason), ("onExitCode", code))
        if all(pattern_matches(rule[key], value) for key, value in checks if key in rule):
            return "RETRY" if str(rule["action"]).upper() == "RETRY" else "EXIT"
    return "RETRY"
