"""Saying once, loudly, that nodes cannot be read: the classification of a vanished pod then guesses.

A pod that disappears without a word (no ``DisruptionTarget`` seen, no final state) is told apart
by its node: gone or going with it (a reclaim, a drain) or still there (a person's or a
controller's delete). Without ``get`` on ``nodes`` that question has no answer; the classifiers
then never let such a guess outrank what a container said itself (``spot.training_job.cause``), but
a single pod that vanishes counts as a preemption (``PodDeleted``). An operator of a real cluster
must learn this from the task log, once per process rather than once per pod.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

_said = threading.Event()

MESSAGE = (
    "airflow-gpu cannot read node %s (HTTP %s): without `get` on `nodes` a pod that vanishes without a "
    "word cannot be told apart as a reclaim (its node gone) or a delete (its node still there); such a pod "
    "counts as a preemption, and never outranks a rank's own failure. Grant `get` on `nodes` to the "
    "service account of the workers and triggerers (the ClusterRole of docs/permissions/kubernetes-nodes.yaml; "
    "docs/permissions.rst). Said once per process."
)


def say_nodes_unreadable(log: logging.Logger | logging.LoggerAdapter[Any], node: str, status: int | None) -> None:
    """Log ``MESSAGE`` at ERROR the first time in this process, at DEBUG after that."""
    if _said.is_set():
        log.debug(MESSAGE, node, status)
        return
    _said.set()
    log.error(MESSAGE, node, status)
