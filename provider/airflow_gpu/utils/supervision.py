"""What supervises this process: Airflow's task supervisor, the triggerer's, or nobody (a run in process).

``airflow.sdk.execution_time.task_runner.SUPERVISOR_COMMS`` is the channel to the supervisor: the task
supervisor's for a task process, the triggerer's (``TriggerCommsDecoder``) in a trigger runner, and
``InProcessSupervisorComms`` when ``dag.test()`` (``airflow dags test``) or ``airflow tasks test`` runs
the task, and its triggers inline, in the caller's own process. Such a run has no supervisor process
to lose and no scheduler to race. The class is told by its name, so that the supervisor module (heavy)
is not imported into every task; if Airflow renames it, every run counts as supervised again, as it
did before the distinction was made.
"""

from __future__ import annotations

import sys
from typing import Any

#: The class of ``SUPERVISOR_COMMS`` in an in-process run (``airflow.sdk.execution_time.supervisor``).
IN_PROCESS_COMMS = "InProcessSupervisorComms"


def comms() -> Any:
    """The channel to the supervisor, or None outside any Airflow run (a plain script, a unit test)."""
    task_runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    return getattr(task_runner, "SUPERVISOR_COMMS", None)


def in_process() -> bool:
    """``dag.test()`` or ``airflow tasks test``: the task and its triggers run in the caller's process."""
    return type(comms()).__name__ == IN_PROCESS_COMMS


def supervised() -> bool:
    """A supervisor process runs this one (a task under an executor, a trigger in a triggerer)."""
    return comms() is not None and not in_process()
