"""Where ``GPUKubernetesOperator`` lets go of a pod without deleting it through its pod manager, the
provider's finalizer (``utils.end_hold``) is removed: a pod KPO keeps (``on_finish_action``), and the
pod ``on_kill`` deletes with KPO's own client call. The pod manager's delete removes it itself
(``RetryingPodManager.delete_pod``), as do the operator's other deletes and the trigger's.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from airflow_gpu.operators.orphaned_try import orphaned, settle_orphaned
from airflow_gpu.utils.end_hold import released

if TYPE_CHECKING:
    from kubernetes.client import models as k8s


class PodsReleased:
    """A mixin of ``GPUKubernetesOperator``, after ``UnreadSuccessKept`` in its bases: a pod that mixin keeps
    unread for KPO's reattach to read never comes here, and stays held until it is read."""

    def process_pod_deletion(self, pod: k8s.V1Pod, *, reraise: bool = True) -> bool:
        op: Any = self
        if orphaned(op):  # the supervisor died during the cleanup: an ended pod, held, is the retry's to read
            ended = pod is not None and pod.status is not None and pod.status.phase in ("Succeeded", "Failed")
            if not ended:  # one that runs is left to the retry, or deleted: ``orphaned_try.settle``
                settle_orphaned(op, pod)
            return False
        deleted: bool = super().process_pod_deletion(pod, reraise=reraise)  # type: ignore[misc]
        if not deleted and pod is not None:  # kept: its end was read, or it is left as the user asked
            with contextlib.suppress(Exception):  # ``airflow-gpu reap`` releases what a failed PATCH leaves
                released(op.client, pod, op.log)
        return deleted

    def on_kill(self) -> None:
        op: Any = self
        super().on_kill()  # type: ignore[misc]
        if op.pod is not None:  # deleted or kept (``on_kill_action``): nobody will read its end now
            with contextlib.suppress(Exception):
                released(op.client, op.pod, op.log)
