"""ConfigMaps and Secrets as the API server admits them.

Keys are checked as ``ValidateConfigMap``/``ValidateSecret`` do (``IsConfigMapKey``: ``[-._a-zA-Z0-9]+``,
at most 253 characters, not ``.`` or ``..``); a Secret's ``stringData`` is folded into ``data``
(base64) and dropped, its ``type`` defaults to ``Opaque``, and data beyond 1 MiB is refused, as
the ``v1`` Secret strategy and validation do.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from airflow_gpu.testing.kubernetes.objects import bad_request, invalid_value

PLURALS = ("configmaps", "secrets")
MAX_BYTES = 1024 * 1024  # TotalSecretSizeLimit / MaxConfigMapSize
_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
KEY_MESSAGE = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
    "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)


def _key_causes(field: str, keys: list[str]) -> list[dict[str, str]]:
    causes = []
    for key in keys:
        if len(key) > 253:
            causes.append(invalid_value(f"{field}[{key}]", key, "must be no more than 253 characters"))
        elif not _KEY.match(key):
            causes.append(invalid_value(f"{field}[{key}]", key, KEY_MESSAGE))
        elif key in (".", ".."):
            causes.append(invalid_value(f"{field}[{key}]", key, f"must not be '{key}'"))
    return causes


def admit(plural: str, obj: dict[str, Any]) -> list[dict[str, str]]:
    """Default and normalise ``obj`` in place; return the validation causes (empty: admitted)."""
    if plural == "secrets":
        obj.setdefault("type", "Opaque")
        data = dict(obj.get("data") or {})
        for key, value in data.items():
            try:
                base64.b64decode(str(value or ""), validate=True)
            except (binascii.Error, ValueError) as error:
                raise bad_request(f"illegal base64 data in Secret data[{key}]: {error}") from None
        for key, value in (obj.pop("stringData", None) or {}).items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        if data:
            obj["data"] = data
        causes = _key_causes("data", list(data))
        size = sum(len(base64.b64decode(str(v or ""))) for v in data.values())
        if size > MAX_BYTES:
            causes.append(invalid_value("data", "", f"Too long: must have at most {MAX_BYTES} bytes"))
        return causes
    data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
    causes = _key_causes("data", list(data)) + _key_causes("binaryData", list(binary))
    causes += [
        invalid_value(f"data[{key}]", key, "duplicate of key present in binaryData") for key in data if key in binary
    ]
    return causes
