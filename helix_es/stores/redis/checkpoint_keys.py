"""The keys and values of the Redis checkpoint view. A thread's keys share the hash tag `{<thread id>}`.

Per thread, under `helix:lg:<view>:<ns>:{<thread>}`:

- `:applied` the thread's guard (the offset of its last folded event);
- `:cp` a hash `<ns>\\0<id>` -> the checkpoint row (JSON), `:ids:<ns>` a sorted set of ids (by
  lexical order: LangGraph's ids sort by time), `:nss` its checkpoint namespaces, `:runs` a hash
  `<ns>\\0<id>` -> run id (what deletions consult);
- `:blobs` a hash `<ns>\\0<channel>\\0<version>` -> `type\\0data`;
- `:w:<ns>\\0<id>` a hash `<task id>\\0<idx>` -> the write row (JSON).

Beside them, `helix:lg:<view>:<ns>:threads` lists the threads (for reads across threads).
"""

from __future__ import annotations

import base64
import json
import re

from helix_es.model import names
from helix_es.model.events import Serialized
from helix_es.views.checkpoints import Saved, WriteRow

SEP = "\x00"


class ThreadKeys:
    def __init__(self, view: str, namespace: str, thread_id: str) -> None:
        base = f"helix:lg:{view}:{namespace}:{{{names.check_session_id(thread_id, 'thread_id')}}}"
        self.applied = f"{base}:applied"
        self.cp = f"{base}:cp"
        self.nss = f"{base}:nss"
        self.runs = f"{base}:runs"
        self.blobs = f"{base}:blobs"
        self.wrote = f"{base}:wrote"  # the (checkpoint_ns, checkpoint_id) with writes: a deleted thread's go
        self._base = base

    def ids(self, checkpoint_ns: str) -> str:
        return f"{self._base}:ids:{checkpoint_ns}"

    def writes(self, checkpoint_ns: str, checkpoint_id: str) -> str:
        return f"{self._base}:w:{checkpoint_ns}{SEP}{checkpoint_id}"


def threads_key(view: str, namespace: str) -> str:
    return f"helix:lg:{view}:{namespace}:threads"


def namespace_glob(view: str, namespace: str) -> tuple[str, re.Pattern[str]]:
    """Every thread key of the namespace: the SCAN glob, and its exact form (a glob is looser)."""
    head = f"helix:lg:{view}:{namespace}:"
    return f"{head}{{*}}:*", re.compile(re.escape(head) + r"\{[^{}]*\}:.*$", re.DOTALL)


def _raw(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def saved_value(s: Saved) -> str:
    c, m = s.checkpoint, s.metadata
    return json.dumps([s.parent_checkpoint_id, c.type, _b64(c.data), m.type, _b64(m.data), s.run_id])


def saved_of(thread_id: str, checkpoint_ns: str, checkpoint_id: str, value: bytes | str) -> Saved:
    parent, ct, cd, mt, md, run_id = json.loads(value)
    c, m = Serialized(ct, base64.b64decode(cd)), Serialized(mt, base64.b64decode(md))
    return Saved(thread_id, checkpoint_ns, checkpoint_id, parent, c, m, run_id)


def blob_value(value: Serialized) -> bytes:
    return value.type.encode() + SEP.encode() + value.data


def blob_of(value: bytes | str) -> Serialized:
    kind, _, data = _raw(value).partition(SEP.encode())
    return Serialized(kind.decode(), data)


def write_value(w: WriteRow) -> str:
    return json.dumps([w.channel, w.value.type, _b64(w.value.data), w.task_path])


def write_of(field: bytes | str, value: bytes | str) -> WriteRow:
    task_id, _, idx = _raw(field).decode().rpartition(SEP)
    channel, kind, data, task_path = json.loads(value)
    return WriteRow(task_id, int(idx), channel, Serialized(kind, base64.b64decode(data)), task_path)
