"""``.. operator-arguments:: airflow_gpu.operators.kubernetes.GPUKubernetesOperator`` lists every
argument the operator takes, read from the ``__init__`` signatures along its MRO: the ones this
provider adds, the ones it takes over from the base operator (declared again, often with another
default), and the ones passed on untouched to ``KubernetesPodOperator``, ``BatchOperator`` or
Airflow's ``BaseOperator``, each linked (intersphinx) to the class that documents it.

Read from the code, the table cannot drift from it. What a new or overridden argument means is its
``:param:`` field in the docstring of the provider's class that declares it (``meanings``), so that
a reader has type, default and meaning on one row; an inherited one links to the class that
documents it.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

OURS = "airflow_gpu"
#: Where Airflow defines a base under one name and documents it under another.
DOCUMENTED_AS = {"airflow.sdk.bases.operator.BaseOperator": "airflow.sdk.BaseOperator"}
DEFAULT_WIDTH = 40


@dataclass(frozen=True)
class Argument:
    """One keyword argument: where it comes from and how it is declared where it comes from."""

    name: str
    annotation: str
    default: str
    origin: str  # "new", "overridden" or "inherited"
    base: str | None  # the base class that declares it (overridden, inherited), dotted
    meaning: str = ""  # its ``:param:`` text in the provider's docstrings (new, overridden)


def _dotted(cls: type) -> str:
    dotted = f"{cls.__module__}.{cls.__qualname__}"
    return DOCUMENTED_AS.get(dotted, dotted)


def _declared(cls: type) -> dict[str, inspect.Parameter]:
    """The named parameters of ``cls.__init__`` when ``cls`` defines it (not ``self``, ``*args``, ``**kwargs``)."""
    init = vars(cls).get("__init__")
    if init is None:
        return {}
    try:
        parameters = inspect.signature(init).parameters
    except (TypeError, ValueError):  # a C or attrs-made initialiser without a readable signature
        return {}
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {name: p for name, p in list(parameters.items())[1:] if p.kind in plain}


def _shown(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return "required"
    text = repr(value)
    return text if len(text) <= DEFAULT_WIDTH else text[: DEFAULT_WIDTH - 3] + "..."


def _annotation(parameter: inspect.Parameter) -> str:
    if parameter.annotation is inspect.Parameter.empty:
        return ""
    if isinstance(parameter.annotation, str):
        return parameter.annotation
    return inspect.formatannotation(parameter.annotation)


#: A ``:param name:`` field and its continuation lines (indented deeper than the field).
_PARAM = re.compile(
    r"^(?P<indent>[ \t]*):param (?:[^:]+ )?(?P<name>\w+):(?P<text>.*(?:\n(?P=indent)[ \t]+\S.*)*)", re.M
)


def meanings(cls: type) -> dict[str, str]:
    """``:param:`` texts of ``cls`` and of the provider's classes it derives from, the nearest first, each
    on one line (a field that says "or" to run on into the next, as ``job_queue``'s, keeps its words)."""
    found: dict[str, str] = {}
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] != OURS:
            continue
        for field in _PARAM.finditer(inspect.cleandoc(klass.__doc__ or "")):
            found.setdefault(field["name"], " ".join(field["text"].split()))
    return found


def arguments(cls: type) -> list[Argument]:
    """Every argument of ``cls`` in the order a reader wants them: new, overridden, then inherited
    by base class (nearest first), each in its declaration order.

    An argument is *new* when only this provider's classes declare it, *overridden* when one of
    them declares it again over a base's, *inherited* when only a base declares it (the provider's
    ``__init__`` passes it on in ``**kwargs``)."""
    ours = [c for c in cls.__mro__ if c.__module__.split(".")[0] == OURS]
    bases = [c for c in cls.__mro__ if c.__module__.split(".")[0] != OURS]
    said = meanings(cls)
    found: dict[str, Argument] = {}
    for klass in ours:
        for name, parameter in _declared(klass).items():
            base = next((b for b in bases if name in _declared(b)), None)
            found.setdefault(
                name,
                Argument(
                    name,
                    _annotation(parameter),
                    _shown(parameter.default),
                    "overridden" if base else "new",
                    _dotted(base) if base else None,
                    said.get(name, ""),
                ),
            )
    for klass in bases:
        for name, parameter in _declared(klass).items():
            found.setdefault(
                name, Argument(name, _annotation(parameter), _shown(parameter.default), "inherited", _dotted(klass))
            )
    rank = {"new": 0, "overridden": 1, "inherited": 2}
    order = {_dotted(b): i for i, b in enumerate(bases)}
    return sorted(found.values(), key=lambda a: (rank[a.origin], order.get(a.base or "", -1)))


def _cell(text: str) -> str:
    return f"``{text}``" if text else ""


def rst_table(cls: type) -> list[str]:
    """The reStructuredText of the arguments table (a list-table, so that long types wrap)."""
    lines = [
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 16 22 14 30 18",
        "",
        "   * - Argument",
        "     - Type",
        "     - Default",
        "     - Meaning",
        "     - From",
    ]
    for argument in arguments(cls):
        short = (argument.base or "").rsplit(".", 1)[-1]
        origin = {
            "new": f"new in {cls.__name__}",
            "overridden": f"overrides :py:class:`~{argument.base}`",
            "inherited": f"inherited from :py:class:`{short} <{argument.base}>`",
        }[argument.origin]
        lines += [
            f"   * - ``{argument.name}``",
            f"     - {_cell(' '.join(argument.annotation.split()))}",
            f"     - {_cell(argument.default)}",
            f"     - {argument.meaning or ('see ' + short if short else '')}",
            f"     - {origin}",
        ]
    return lines


class OperatorArguments(SphinxDirective):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        module, _, name = self.arguments[0].rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        container = nodes.container(classes=["operator-arguments"])
        self.state.nested_parse(StringList(rst_table(cls), source=self.get_source_info()[0]), 0, container)
        return [container]


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("operator-arguments", OperatorArguments)
    return {"parallel_read_safe": True}
