"""How many examples a property test tries: its full count in ``make test``, fewer in the quick loop.

A test that wants more (or fewer) than Hypothesis's default 100 asks for ``examples(N)``, which is N
under the default profile and scales with the loaded profile's ``max_examples``: ``make test-quick``
loads ``quick`` (``tests/conftest.py``), 20 derandomized examples per 100, so the inner loop tries the
same inputs on every run and ``make test`` goes on exploring new ones.
"""

from __future__ import annotations

from hypothesis import settings

#: Hypothesis's own default ``max_examples``, which the counts in the tests are relative to.
DEFAULT_EXAMPLES = 100


def examples(full: int) -> int:
    return max(1, full * settings.default.max_examples // DEFAULT_EXAMPLES)
