"""A GPU trigger's kill as a task this module owns: bounded by the triggerer's budget, never dropped silently.

Airflow 3.3's trigger runner (``airflow/jobs/triggerer_job_runner.py``, ``run_trigger``) calls
``on_kill`` under ``asyncio.wait_for(..., timeout=[triggerer] on_kill_timeout)`` (30 s by default),
and its ``cancel_triggers`` cancels the trigger's task again at every turn of its loop until that
task ends; ``run_trigger`` swallows the cancel that reaches ``on_kill``. The kill (the task's state
read, then the deletes) is therefore shielded: it runs as a task of its own. That task used to be
nobody's: the runner moved on, and a delete still being retried (``utils.api_retry`` rides out
429/5xx for five minutes) ran for minutes after the runner gave up, while at triggerer shutdown
``asyncio.run`` cancelled it without a word, or a loop closed under it destroyed it pending.

Here every kill is a task in ``_RUNNING`` (strong references: the event loop keeps only weak ones),
removed when it ends. It runs under ``retry_deadline.until``, so its calls retry only within
``on_kill_budget()`` less ``MARGIN``, and it is cut at the budget itself. Whatever it set out to stop
(``Kill.aim``) and did not (``Kill.stopped``) is named in one ERROR line, whether the budget ran
out, a call failed, or the triggerer stopped first (the task is cancelled at ``asyncio.run``'s end;
a loop closed without cancelling it is reported at interpreter exit): ``airflow-gpu`` leaves the
rest to a person, who finds it by those names.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from airflow_gpu.utils import retry_deadline

LOG = logging.getLogger(__name__)
#: ``[triggerer] on_kill_timeout``'s default in Airflow 3.3.
DEFAULT_BUDGET_SECONDS = 30.0
#: Seconds of the budget kept from the retries, for the last answers to arrive before the cut.
MARGIN = 2.0


class Kill:
    """What one kill set out to stop, and what it stopped."""

    def __init__(self, what: str, log: Any) -> None:
        self.what, self.log = what, log
        self._aimed: dict[str, bool] = {}

    def aim(self, *names: str) -> None:
        """``names`` (``pod default/x``, ``AWS Batch job <id>``) are to be stopped."""
        for name in names:
            self._aimed.setdefault(name, False)

    def stopped(self, name: str) -> None:
        self._aimed[name] = True

    def left(self) -> list[str]:
        return [name for name, done in self._aimed.items() if not done]

    def report(self, why: str) -> None:
        """One ERROR naming what is left running, if anything is."""
        if left := self.left():
            self.log.error("%s: %s; left running: %s. Stop it by hand.", self.what, why, ", ".join(left))


_RUNNING: dict[asyncio.Task[None], Kill] = {}


def on_kill_budget() -> float:
    """``[triggerer] on_kill_timeout``: how long the trigger runner waits for ``on_kill``."""
    try:
        from airflow.configuration import conf

        return float(conf.getint("triggerer", "on_kill_timeout", fallback=int(DEFAULT_BUDGET_SECONDS)))
    except Exception:  # no configuration to read: Airflow's default
        return DEFAULT_BUDGET_SECONDS


def running() -> list[Kill]:
    """The kills of this process that have not ended."""
    return [kill for task, kill in _RUNNING.items() if not task.done()]


async def run(what: str, log: Any, work: Callable[[Kill], Awaitable[None]]) -> None:
    """``work(kill)`` as a task owned here, waited for (shielded from the runner's repeated cancels).

    A cancel of the caller leaves the task running, within its budget; a cancel of the task itself
    (the loop shutting down) ends it with the ERROR naming what it left.
    """
    kill = Kill(what, log)
    task = asyncio.get_running_loop().create_task(_bounded(kill, work, on_kill_budget()), name=f"kill: {what}")
    _RUNNING[task] = kill
    task.add_done_callback(lambda done: _RUNNING.pop(done, None))
    await asyncio.shield(task)


async def _bounded(kill: Kill, work: Callable[[Kill], Awaitable[None]], budget: float) -> None:
    with retry_deadline.until(max(budget - MARGIN, 0.0)):  # before the task below copies the context
        try:
            await asyncio.wait_for(work(kill), budget)
        except (TimeoutError, asyncio.TimeoutError):
            kill.report(f"not done within the triggerer's on_kill budget ({budget:g} s)")
        except asyncio.CancelledError:
            kill.report("the triggerer stopped before the kill ended")
            raise
        except Exception as error:
            kill.log.exception("%s failed", kill.what)
            kill.report(f"{type(error).__name__}: {error}")
        else:
            kill.report(f"its calls gave up within the triggerer's on_kill budget ({budget:g} s)")


@atexit.register
def _report_unfinished() -> None:
    """A loop closed without cancelling a kill (it never ran to an end): said, not lost silently."""
    for kill in running():
        kill.report("the process exited with the kill still pending")
