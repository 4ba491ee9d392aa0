"""Fixtures a test module here opts in to (``tests/quick_waits.py``: shorter backoff pauses)."""

from tests.quick_waits import fast_api_backoff, fast_backoff

__all__ = ["ON_KILL_TIMEOUT", "fast_api_backoff", "fast_backoff"]

#: ``[triggerer] on_kill_timeout`` in the tests of Mark Failed under throttling (30 s by default): their
#: throttles' ``Retry-After`` is 4 s, a quarter of it, as 8 s is of the default's 30. Not less: the deletes'
#: own answers take seconds on a loaded machine (8 s with 2 s waits timed out under a load of 17 on 2 cores).
ON_KILL_TIMEOUT = 16
