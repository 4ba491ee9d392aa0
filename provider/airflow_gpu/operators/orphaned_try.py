"""A try whose Airflow task supervisor died, while the task process lives on.

Airflow's supervisor forks the task process and reads its logs through a pipe; nothing ends the task
when the supervisor is killed (SIGKILL, the OOM killer), so the task goes on until its next log line
fails with a broken pipe. On the way out KPO's cleanup then labelled the running pod
``already_checked`` and tried to delete it, and its own log line failed before the delete: the pod
ran on, and the retry, which skips a checked pod, ran the workload again beside it (the soak, seed 9).

Such a try can no longer tell Airflow anything. When a retry will take its pod over
(the operator asks ``retry_handover.why_no_takeover``: reattach on, a try left, no retry policy) it leaves the pod
alone for that retry; otherwise it deletes the pod, quietly, so that nothing runs on for nobody.
The supervisor is the task process's parent (a plain fork under every executor); a run with no
supervisor (``dag.test()``, ``airflow tasks test``: in process) is never judged orphaned.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from airflow_gpu.utils import end_hold


def remember(op: Any) -> None:
    """Note this process's supervisor, where it has one, as the try starts or resumes."""
    from airflow_gpu.utils.supervision import supervised

    op._supervisor = os.getppid() if supervised() else None


def orphaned(op: Any) -> bool:
    """The supervisor noted at the start is no longer this process's parent."""
    supervisor = getattr(op, "_supervisor", None)
    return supervisor is not None and os.getppid() != supervisor


def settle(op: Any, pod: Any, taken_over: bool) -> None:
    """Leave ``pod`` to the retry that will take it over (``taken_over``), else delete it; no log line (they
    fail here)."""
    if pod is None or taken_over:
        return
    with contextlib.suppress(Exception):
        op.client.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                        grace_period_seconds=op.termination_grace_period)  # fmt: skip
    end_hold.release_quietly(op.client, pod.metadata.name, pod.metadata.namespace, op.log)
