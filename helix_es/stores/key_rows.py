"""Data keys as JSON documents: how the file and Redis key stores keep a `KeyRow`."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from helix_es.stores.ports import KeyRow


def key_row_json(row: KeyRow) -> str:
    return json.dumps(
        {
            "wrapped_key": None if row.wrapped_key is None else base64.b64encode(row.wrapped_key).decode(),
            "wrapped_by": row.wrapped_by,
            "created_at": row.created_at.isoformat(),
            "erased_at": None if row.erased_at is None else row.erased_at.isoformat(),
        }
    )


def key_row_from(namespace: str, session_id: str, key_id: str, doc: Mapping[str, Any]) -> KeyRow:
    wrapped = doc.get("wrapped_key")
    erased = doc.get("erased_at")
    return KeyRow(
        namespace,
        session_id,
        key_id,
        None if wrapped is None else base64.b64decode(wrapped),
        doc.get("wrapped_by"),
        datetime.fromisoformat(doc["created_at"]),
        None if erased is None else datetime.fromisoformat(erased),
    )
