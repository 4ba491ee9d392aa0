"""What a pod carries that tells a later try whether to take it over: KPO's checked label and the run's state.

Its own module, importing nothing of the operators, so that the modules that read these marks
(the retry hand-over, the take-over of an unread success) need not import each other or the
operator class that imports them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from airflow_gpu.utils.training_job import STATE_ANNOTATION

CHECKED_LABEL = "already_checked"  # KPO's POD_CHECKED_KEY: a pod no try reattaches to


def submissions(annotations: Mapping[str, str] | None) -> int:
    """The run's submissions as recorded on a pod or Job when it was made (0 when unreadable)."""
    try:
        state = json.loads((annotations or {}).get(STATE_ANNOTATION) or "{}")
        return int(state.get("submissions") or 0) if isinstance(state, dict) else 0
    except (TypeError, ValueError):
        return 0
