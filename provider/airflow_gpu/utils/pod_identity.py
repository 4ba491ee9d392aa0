"""Is this pod (or Batch job) the one a task try may reattach to?

KPO (Airflow 3.3+) records a pod's name in the task state store and reconnects to whatever pod
has that name on the next try. A name is a slot: once the pod is deleted another run's pod can
take it (``random_name_suffix=False``, fixed names in templates), and the retry then follows and
deletes a stranger's GPU job (apache/airflow#71743). The fence is the identity the pod carries:
the labels KPO puts on every pod, a try no later than the one asking, and the uid recorded at
creation. A Batch job carries the same identity in its tags. Pure function, so the rule is tested
without a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def identity_mismatch(
    labels: Mapping[str, str],
    uid: str | None,
    *,
    expected: Mapping[str, str],
    try_number: int,
    recorded_uid: str | None = None,
    try_key: str = "try_number",
) -> str | None:
    """Why the pod is not this task try's, or None when it is.

    :param labels: the pod's labels.
    :param uid: the pod's ``metadata.uid``.
    :param expected: the task's identifying labels (dag, task, run, map index) as KPO makes them.
    :param try_number: the try asking; a pod from a later try is never an earlier try's to take.
    :param recorded_uid: the uid stored when the pod was created, if the store has one.
    :param try_key: the label (or Batch job tag) that holds the try number.
    """
    if recorded_uid and uid and recorded_uid != uid:
        return f"its uid {uid} is not the recorded {recorded_uid}: the name was reused"
    for key, value in expected.items():
        if labels.get(key) != value:
            return f"label {key}={labels.get(key)!r}, this task has {value!r}"
    if "map_index" in labels and "map_index" not in expected:
        return f"it belongs to mapped instance {labels['map_index']}, this task is not mapped"
    pod_try = labels.get(try_key)
    if pod_try is not None and (not pod_try.isdigit() or int(pod_try) > try_number):
        return f"it was made by try {pod_try}, this is try {try_number}"
    return None


#: Annotation with the task try's exact identity, JSON: the labels are shortened and hashed by
#: ``make_safe_label_value`` whenever a value is over 63 characters or holds anything but letters,
#: digits and ``-_.`` (every ``manual__2026-...+00:00`` run id), so they cannot name the run to
#: Airflow's REST API. ``airflow-gpu reap`` asks Airflow about the task instance this names.
TASK_ANNOTATION = "airflow-gpu/task-instance"


def task_annotation(ti: Any) -> str:
    """The ``TASK_ANNOTATION`` value of a task try (``ti``: the task instance)."""
    map_index = getattr(ti, "map_index", -1)
    identity = {
        "dag_id": ti.dag_id,
        "task_id": ti.task_id,
        "run_id": str(ti.run_id),
        "map_index": -1 if map_index is None else int(map_index),
        "try_number": int(ti.try_number),
    }
    return json.dumps(identity, separators=(",", ":"))
