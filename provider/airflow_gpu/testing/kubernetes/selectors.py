"""Kubernetes label and field selectors, parsed and matched as the API server does.

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``,
comma-separated (all must hold). Field selectors: ``path=value``, ``path==value``,
``path!=value`` on dotted paths such as ``metadata.name`` or ``involvedObject.name``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Matcher = Callable[[Mapping[str, str]], bool]


class SelectorError(ValueError):
    """A selector the API server would refuse with 400 Bad Request."""


_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^(?P<key>{_KEY})\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)$")
_EQ = re.compile(rf"^(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})$")
_EXISTS = re.compile(rf"^(?P<neg>!?)\s*(?P<key>{_KEY})$")


def _split_requirements(selector: str) -> list[str]:
    """Split on commas that are not inside ``( )``."""
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _requirement(text: str) -> Matcher:
    if match := _SET.match(text):
        key, values = match["key"], {v.strip() for v in match["values"].split(",") if v.strip()}
        if not all(re.fullmatch(_VALUE, v) for v in values):
            raise SelectorError(f"invalid value in label selector requirement {text!r}")
        if match["op"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EQ.match(text):
        key, value = match["key"], match["value"]
        if match["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _EXISTS.match(text):
        key = match["key"]
        if match["neg"]:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise SelectorError(f"unable to parse requirement: {text!r}")


def label_matcher(selector: str | None) -> Matcher:
    """A predicate on a label mapping; an empty selector matches everything."""
    requirements = [_requirement(part) for part in _split_requirements(selector or "")]
    return lambda labels: all(requirement(labels) for requirement in requirements)


def _field(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


def field_matcher(selector: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate on a whole object for a field selector."""
    checks: list[Callable[[Mapping[str, Any]], bool]] = []
    for part in _split_requirements(selector or ""):
        match = re.match(r"^(?P<path>[A-Za-z0-9_.]+)\s*(?P<op>==|=|!=)\s*(?P<value>.*)$", part)
        if match is None:
            raise SelectorError(f"invalid field selector: {part!r}")
        checks.append(_field_check(match["path"], match["op"] == "!=", match["value"].strip()))
    return lambda obj: all(check(obj) for check in checks)


def _field_check(path: str, negate: bool, value: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda obj: (_field(obj, path) == value) is not negate


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` (``matchLabels`` and ``matchExpressions``) against labels, as
    ``LabelSelectorAsSelector`` reads it: an empty selector matches everything, none matches nothing."""
    if selector is None:
        return False
    match_labels = selector.get("matchLabels") or {}
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        value = labels.get(key) if isinstance(key, str) else None
        if operator == "In" and value not in values:
            return False
        if operator == "NotIn" and value is not None and value in values:
            return False
        if operator == "Exists" and value is None:
            return False
        if operator == "DoesNotExist" and value is not None:
            return False
    return True
