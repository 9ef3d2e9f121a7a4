"""Data keys in files: one JSON file per session under a directory (the embedded mode)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from helix_es.model import names
from helix_es.stores.key_rows import key_row_from, key_row_json
from helix_es.stores.ports import KeyRow

DEFAULT_DIRECTORY = ".helix/keys"  # beside the embedded log's default .helix/log


class FileKeyStore:
    """A JSON file per session: `<dir>/ns-<namespace>/<sha256(session id)>.json`, mode 0600.

    Writes replace the file atomically (temp file, fsync, rename) under a lock file, so
    processes sharing the directory agree. An erased key's old file is unlinked; its blocks
    may survive on disk until reused, useless without the master key.
    """

    kind = "file"

    def __init__(self, directory: str | os.PathLike[str] = DEFAULT_DIRECTORY) -> None:
        self.directory = Path(directory).resolve()

    def __repr__(self) -> str:
        return f"FileKeyStore({str(self.directory)!r})"

    def path(self, namespace: str, session_id: str) -> Path:
        digest = hashlib.sha256(names.check_session_id(session_id).encode()).hexdigest()
        return self.directory / f"ns-{names.check_namespace(namespace)}" / f"{digest}.json"

    def _read(self, namespace: str, session_id: str) -> list[KeyRow]:
        try:
            doc = json.loads(self.path(namespace, session_id).read_text())
        except FileNotFoundError:
            return []
        return [key_row_from(namespace, session_id, k["key_id"], k) for k in doc["keys"]]

    def _write(self, namespace: str, session_id: str, rows: list[KeyRow]) -> None:
        path = self.path(namespace, session_id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        doc = {
            "namespace": namespace,
            "session_id": session_id,
            "keys": [{"key_id": r.key_id, **json.loads(key_row_json(r))} for r in rows],
        }
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself must survive a crash
        finally:
            os.close(dir_fd)

    @contextlib.contextmanager
    def _locked(self) -> Any:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.directory / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    async def rows(self, namespace: str, session_id: str) -> list[KeyRow]:
        return sorted(self._read(namespace, session_id), key=lambda r: (r.created_at, r.key_id))

    def _insert(self, row: KeyRow) -> None:
        with self._locked():
            rows = self._read(row.namespace, row.session_id)
            if any(not r.erased for r in rows) or any(r.key_id == row.key_id for r in rows):
                return
            self._write(row.namespace, row.session_id, [*rows, row])

    async def insert(self, row: KeyRow) -> None:
        await asyncio.to_thread(self._insert, row)

    def _erase(self, namespace: str, session_id: str, at: datetime) -> list[str]:
        with self._locked():
            rows = self._read(namespace, session_id)
            live = [r.key_id for r in rows if not r.erased]
            if live:
                self._write(
                    namespace,
                    session_id,
                    [
                        r
                        if r.erased
                        else KeyRow(r.namespace, r.session_id, r.key_id, None, r.wrapped_by, r.created_at, at)
                        for r in rows
                    ],
                )
            return sorted(live)

    async def erase(self, namespace: str, session_id: str, at: datetime) -> list[str]:
        return await asyncio.to_thread(self._erase, namespace, session_id, at)

    async def close(self) -> None:
        pass
