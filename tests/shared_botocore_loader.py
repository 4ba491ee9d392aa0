"""One botocore data loader per test process, shared by every botocore session made in it.

Airflow's AWS hooks make a new boto3 session for each hook, and each new botocore session has a
loader of its own, which parses the JSON of the service's model and of ``endpoints.json`` again:
for ``GPUBatchHook`` about 0.1 s of CPU per hook, and the operator and trigger tests make
hundreds of hooks (py-spy on tests/operators: half the process's samples were in that parsing).
A loader caches what it parsed, and botocore treats the models it hands out as read-only, as it
does when one session makes several clients: sharing it changes no call, answer or error.

boto3 adds its own data folder to a session's loader's search path at every session; on the shared
loader that folder is added once.
"""

from __future__ import annotations

import threading
from typing import Any

_loaders: dict[str | None, Any] = {}
_lock = threading.Lock()


class _SearchPaths(list[str]):
    """A loader's search path that keeps one copy of a folder appended again."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


def install() -> None:
    """From now on, each new botocore session of this process uses the shared loader of its data path."""
    import botocore.loaders
    import botocore.session

    def register_data_loader(session: botocore.session.Session) -> None:
        def shared() -> botocore.loaders.Loader:
            data_path = session.get_config_variable("data_path")
            with _lock:
                if data_path not in _loaders:
                    loader = botocore.loaders.create_loader(data_path)
                    loader._search_paths = _SearchPaths(loader.search_paths)
                    _loaders[data_path] = loader
                return _loaders[data_path]

        session._components.lazy_register_component("data_loader", shared)

    botocore.session.Session._register_data_loader = register_data_loader  # type: ignore[method-assign]
