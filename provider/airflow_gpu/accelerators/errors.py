"""The one error type of the accelerator model.

It subclasses ``ValueError`` so that callers who only know "bad input" can catch that, and it
carries the field, the bad value and what is accepted, so an operator can re-raise it with its
own argument name and a test can check each part instead of matching prose.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Fields of the spec itself; other fields (an operator's ``capacity``, ``memory``...) speak for
#: themselves in a message.
SPEC_FIELDS = frozenset({"spec", "type", "count", "memory_gb", "form_factor", "mig"})


class AcceleratorSpecError(ValueError):
    """An accelerator spec that cannot be satisfied, with what would be accepted instead."""

    def __init__(self, field: str, value: object, problem: str, accepted: Iterable[str] | str = ()) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        self.accepted: tuple[str, ...] = (accepted,) if isinstance(accepted, str) else tuple(accepted)
        subject = f"accelerator {field}" if field in SPEC_FIELDS else field
        message = f"{subject} {value!r}: {problem}"
        if self.accepted:
            message += f" (accepted: {', '.join(self.accepted)})"
        super().__init__(message)
