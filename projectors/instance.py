"""A stable Kafka group instance id per projector process (static membership, KIP-345).

A consumer that rejoins its group under the instance id of a member that died takes that
member's place and partitions at once; without one, the group waits out the dead member's
session timeout first (10 s by default) before anyone gets its partitions, and a process
restarted in a crash loop never gets any. So the id must be the same for the same process
slot after a restart, and never shared by two live processes in one group: aiokafka's heartbeat
does not carry the id, so the broker cannot fence the older one, and the two take the membership
from each other at every heartbeat.

`claim()`: the explicit id (`--instance-id`, else `HELIX_INSTANCE_ID`: a Kubernetes pod name)
wins; else `<hostname>-<n>`, where n is the first slot whose lock file under the runtime dir is
free. The lock (`fcntl.flock`) is held for the process's life and the kernel drops it when the
process dies, even by SIGKILL, so a replacement started at once finds that slot free again.
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from helix_es.model.errors import ConfigError

ENV_ID = "HELIX_INSTANCE_ID"
ENV_DIR = "HELIX_RUNTIME_DIR"  # where the slot locks live
MAX_SLOTS = 4096
_VALID = re.compile(r"[A-Za-z0-9._-]{1,200}")  # Kafka's own rule for ids; the view's group is per id


@dataclass
class Instance:
    """An instance id, and the slot lock that keeps it this process's (None for an explicit id)."""

    id: str
    lock: IO[bytes] | None = None

    def release(self) -> None:
        if self.lock is not None:
            self.lock.close()  # closing the file drops the flock
            self.lock = None


def runtime_dir() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "helix-es"
    return Path(tempfile.gettempdir()) / f"helix-es-{os.getuid()}"


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:150] or "host"


def claim(explicit: str | None = None, directory: Path | None = None) -> Instance:
    """This process's instance id: `explicit`, else `HELIX_INSTANCE_ID`, else the first free host slot."""
    given = explicit or os.environ.get(ENV_ID) or None
    if given is not None:
        if not _VALID.fullmatch(given):
            raise ConfigError("instance-id", f"must match [A-Za-z0-9._-]{{1,200}}, got {given!r}")
        return Instance(given)
    where = directory or runtime_dir()
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    host = _host()
    for n in range(MAX_SLOTS):
        lock = (where / f"{host}-{n}.lock").open("ab")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return Instance(f"{host}-{n}", lock)
    raise ConfigError("instance-id", f"all {MAX_SLOTS} slots under {where} are taken; pass --instance-id")
