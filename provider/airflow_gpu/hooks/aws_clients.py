"""How an amazon-provider hook makes its boto3 clients, for less work per task (``GPUBatchHook``).

The amazon hook (``AwsGenericHook``) makes a session per client, and names its caller in the user
agent (``Caller/<class>``) with ``inspect.stack()`` for each one. Mixed in before it, this keeps one
session per region and finds the same caller by walking the frames. If the amazon hook renames these
private methods, its own (slower) ones take over again: the answers are the same.
"""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

from botocore.config import Config

if TYPE_CHECKING:
    from airflow.providers.amazon.aws.hooks.base_aws import AwsGenericHook

    _Hook = AwsGenericHook[Any]
else:
    _Hook = object

__all__ = ["OneSessionClients"]


class OneSessionClients(_Hook):
    """Mixed in before an ``AwsGenericHook`` subclass."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sessions: dict[str | None, Any] = {}
        self._session_lock = threading.RLock()

    def get_session(self, region_name: str | None = None, deferrable: bool = False) -> Any:
        """One boto3 session per region for all of this hook's clients (Batch, SubmitJob's, CloudWatch Logs).

        The amazon hook makes a session per client: each reads botocore's endpoint and service models
        again (about 50 ms of CPU) and resolves the connection's credentials again (with ``role_arn``, an
        STS AssumeRole call each). A task makes three clients. A trigger's hook is made again every
        ``HOOK_TTL``, so rotated keys and an edited connection are still picked up.
        """
        if deferrable:
            return super().get_session(region_name=region_name, deferrable=True)
        # The region asked for, else the hook's or its connection's; with none, boto3's default (the environment,
        # ~/.aws/config), known once that session exists. Not ``conn_region_name``: it asks the Batch client,
        # which may be the client being made (a RecursionError).
        key = region_name or self.region_name
        with self._session_lock:
            if key not in self._sessions:
                session = super().get_session(region_name=region_name)
                self._sessions[key] = session
                if key is None and session.region_name:  # the logs client asks for that region by name
                    self._sessions.setdefault(session.region_name, session)
            return self._sessions[key]

    def get_client_type(
        self, region_name: str | None = None, config: Config | None = None, deferrable: bool = False
    ) -> Any:
        """The amazon hook's client, made one at a time: a boto3 session is not safe to make clients from
        two threads at once (a trigger's threads share its hook)."""
        with self._session_lock:
            return super().get_client_type(region_name=region_name, config=config, deferrable=deferrable)

    @staticmethod
    def _find_operator_class_name(target_function_name: str) -> str | None:
        """The class of the innermost ``target_function_name`` frame's ``self``, as the amazon hook finds
        it for the user agent's ``Caller/``, by walking the frames instead of ``inspect.stack()``.

        ``inspect.stack()`` reads every frame's source lines, and a frame without a file (``<string>``,
        a frozen module) makes ``inspect.getmodule`` walk all of ``sys.modules``: 0.1 to 0.3 CPU-seconds
        in a task process, paid for each client the hook creates (two or three a task). The answer is
        the same; like the original, a frame without ``self`` raises, which ``_get_caller`` turns into
        "Unknown".
        """
        frame: FrameType | None = sys._getframe(0)
        while frame is not None:
            if frame.f_code.co_name == target_function_name:
                return type(frame.f_locals["self"]).__name__
            frame = frame.f_back
        return None

    @staticmethod
    def _find_executor_class_name() -> str | None:
        """The last class named in the globals of the innermost frame whose module has ``BaseExecutor``, as
        the amazon hook finds it, by walking the frames (``_find_operator_class_name`` says why)."""
        frame: FrameType | None = sys._getframe(0)
        while frame is not None:
            classes: list[str] = [name for name, value in frame.f_globals.items() if isinstance(value, type)]
            if "BaseExecutor" in classes:
                return classes[-1]
            frame = frame.f_back
        return None
