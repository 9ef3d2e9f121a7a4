"""The embedded log: one append-only file per namespace, the same Avro bytes as Kafka.

File layout (`helix_es.log.frames`): an 8-byte magic, then frames of `length (u32 BE) | crc32
(u32 BE) | event`. A frame is the event at offset N of partition 0. On open, a torn last frame
(a crash mid-append) is cut off; damage anywhere before the tail raises `LogCorrupted`.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import helix_es.log.frames as frames
from helix_es.log.check import Checker, OnBad, claimed, skipped
from helix_es.log.codec import Codec
from helix_es.log.frames import FRAME, MAGIC
from helix_es.log.port import MAX_EVENT_BYTES, OnEnd, Unclaimed
from helix_es.model import names
from helix_es.model.errors import EventTooLarge, HelixError, InvalidInput, LogCorrupted
from helix_es.model.events import Event, Position, Record

log = logging.getLogger(__name__)


class LogFile:
    """One namespace's file. Opened once per process (see `_open_files`), locked against others."""

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = path
        self.fsync = fsync
        self.offsets: list[int] = []  # byte position of each frame
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise HelixError(
                f"{path} is in use by another process; the embedded log has one writer. "
                "Stop the other process, or use `log: {type: kafka}` for several."
            ) from None
        try:
            self.end = self._recover()
        except BaseException:
            os.close(self._fd)
            raise

    def _recover(self) -> int:
        size = os.fstat(self._fd).st_size
        if size == 0:
            os.write(self._fd, MAGIC)
            self._sync()
            return len(MAGIC)
        if size < len(MAGIC):
            # A crash while writing the header of a new file: nothing was ever logged.
            return self._cut(0, size, "a torn header")
        if os.pread(self._fd, len(MAGIC), 0) != MAGIC:
            raise LogCorrupted(f"{self.path} is not a helix-es log (bad magic)")
        pos = len(MAGIC)
        while pos < size:
            problem = frames.problem(self._fd, pos, size)
            if problem is None:
                self.offsets.append(pos)
                pos += FRAME.size + frames.length_at(self._fd, pos)
                continue
            if self._is_tail(pos, size):
                return self._cut(pos, size, problem)
            raise LogCorrupted(
                f"{self.path} is damaged at byte {pos} (frame {len(self.offsets)}): {problem}, "
                f"and {size - pos} bytes follow it. It is not skipped silently: restore the file "
                f"from a copy, or keep the {len(self.offsets)} good events with `truncate -s {pos}`."
            )
        return pos

    def _is_tail(self, pos: int, size: int) -> bool:
        """A torn append is the last frame: it reaches the end of the file or is zero fill."""
        head = os.pread(self._fd, FRAME.size, pos)
        if len(head) == FRAME.size:
            length = FRAME.unpack(head)[0]
            if 0 < length <= MAX_EVENT_BYTES and pos + FRAME.size + length >= size:
                return True
        rest = os.pread(self._fd, min(size - pos, FRAME.size + MAX_EVENT_BYTES + 1), pos)
        return len(rest) == size - pos and (len(rest) < FRAME.size or not rest.strip(b"\x00"))

    def _cut(self, pos: int, size: int, problem: str) -> int:
        log.warning("%s: cut %d bytes of %s at its tail (a crash mid-append)", self.path, size - pos, problem)
        os.ftruncate(self._fd, pos)
        if pos == 0:
            os.write(self._fd, MAGIC)
            pos = len(MAGIC)
        self._sync()
        return pos

    def _sync(self) -> None:
        if self.fsync:
            os.fdatasync(self._fd)

    def append(self, data: bytes) -> int:
        """Write one frame; returns its offset. A failed write is rolled back, never left torn."""
        return self.append_many([data])

    def append_many(self, data: Sequence[bytes]) -> int:
        """Write frames in one write and one sync; returns the first one's offset. All or nothing."""
        frame = b"".join(frames.encode(d) for d in data)
        with self._lock:
            start = self.end
            try:
                written = 0
                while written < len(frame):
                    written += os.write(self._fd, frame[written:])
                self._sync()
            except BaseException:
                os.ftruncate(self._fd, start)
                raise
            first = len(self.offsets)
            pos = start
            for d in data:
                self.offsets.append(pos)
                pos += FRAME.size + len(d)
            self.end = pos
            return first

    def frames(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes]]:
        for index in range(start, len(self.offsets) if end is None else min(end, len(self.offsets))):
            yield index, frames.read_at(self._fd, self.offsets[index])

    def close(self) -> None:
        os.close(self._fd)


# Process-wide by nature: flock is per open file, so a second open in this process (another loop's
# runtime) must share the first one's LogFile, or it would find the file locked against itself.
_open_files: dict[Path, tuple[LogFile, int]] = {}
_open_lock = threading.Lock()


class EmbeddedLog:
    """Append-only files under `path`, one per namespace: `<path>/<topic>.log`, partition 0."""

    def __init__(
        self,
        path: str | os.PathLike[str] = ".helix/log",
        *,
        fsync: bool = True,
        topic_prefix: str = names.DEFAULT_TOPIC_PREFIX,
        codec: Codec | None = None,
    ) -> None:
        self.path = Path(path).resolve()
        self.fsync = fsync
        self.topic_prefix = topic_prefix
        self.codec = codec or Codec()
        self._files: dict[str, LogFile] = {}
        self._closed = False
        self._unclaimed = Unclaimed()
        self._prepared: dict[uuid.UUID, bytes] = {}  # encoded ahead of their write (`prepare`)

    def _file(self, namespace: str) -> LogFile:
        f = self._files.get(namespace)
        if f is None:
            path = self.path / f"{names.topic(namespace, self.topic_prefix)}.log"
            with _open_lock:  # one LogFile per file per process, shared by refcount
                shared, refs = _open_files.get(path, (None, 0))
                if shared is None:
                    shared = LogFile(path, fsync=self.fsync)
                _open_files[path] = (shared, refs + 1)
            f = self._files[namespace] = shared
        return f

    async def append(self, event: Event) -> Position:
        data = self.codec.encode(event)
        if len(data) > MAX_EVENT_BYTES:
            raise EventTooLarge("event", f"encodes to {len(data)} bytes, over the {MAX_EVENT_BYTES} limit")
        f = self._file(event.namespace)
        if not f.fsync:
            offset = f.append(data)  # no await: it cannot be cancelled half way
        else:
            # A write whose caller stopped waiting goes on in its thread (see `Unclaimed`).
            sent = self._unclaimed.take(event.event_id)
            if sent is None:
                sent = asyncio.ensure_future(asyncio.to_thread(f.append, data))
            offset = await self._unclaimed.wait(event.event_id, sent)
        return Position(names.topic(event.namespace, self.topic_prefix), 0, offset)

    async def append_many(self, events: Sequence[Event]) -> list[Position]:
        """One write and one sync for them all; each event keeps `append`'s retry (see `Unclaimed`)."""
        if not events:
            return []
        data = [self._encoded(e, f"events[{i}]") for i, e in enumerate(events)]  # all checked, then written
        namespace = events[0].namespace
        if any(e.namespace != namespace for e in events):
            raise InvalidInput("events", "a batch goes to one namespace's log")
        f = self._file(namespace)
        topic = names.topic(namespace, self.topic_prefix)
        if not f.fsync:
            first = f.append_many(data)  # no await: it cannot be cancelled half way
            return [Position(topic, 0, first + i) for i in range(len(data))]
        sent: list[asyncio.Future[Any] | None] = [self._unclaimed.take(e.event_id) for e in events]
        fresh = [i for i, s in enumerate(sent) if s is None]  # not under way from an earlier call
        if fresh:
            batch = asyncio.ensure_future(asyncio.to_thread(f.append_many, [data[i] for i in fresh]))
            for n, i in enumerate(fresh):
                sent[i] = _nth(batch, n)
        waits = [self._unclaimed.wait(e.event_id, s) for e, s in zip(events, sent, strict=True) if s is not None]
        offsets = await asyncio.gather(*waits)
        return [Position(topic, 0, offset) for offset in offsets]

    def prepare(self, event: Event) -> None:
        """Encode and check `event` now, not in the write that carries it (which another caller waits for)."""
        self._prepared[event.event_id] = self._encoded(event)

    def unprepare(self, event: Event) -> None:
        self._prepared.pop(event.event_id, None)

    def _encoded(self, event: Event, what: str = "event") -> bytes:
        ready = self._prepared.pop(event.event_id, None)
        if ready is not None:
            return ready
        data = self.codec.encode(event)
        if len(data) > MAX_EVENT_BYTES:
            raise EventTooLarge(what, f"encodes to {len(data)} bytes, over the {MAX_EVENT_BYTES} limit")
        return data

    async def read(
        self,
        namespace: str,
        *,
        session_id: str | None = None,
        on_bad: OnBad | None = None,
        start: Mapping[int, int] | None = None,
        on_end: OnEnd | None = None,
    ) -> AsyncIterator[Record]:
        """A damaged frame is `LogCorrupted` (on open); with `on_bad`, a whole frame that `Checker`
        refuses is reported to it and passed over (see `EventLog.read`). One partition: 0."""
        topic = names.topic(namespace, self.topic_prefix)
        file = self._file(namespace)
        first = 0 if start is None else max(0, start.get(0, 0))
        end = max(first, len(file.offsets))  # what is on the log when the read starts
        if on_bad is None:
            for offset, data in file.frames(first, end):
                event = self.codec.decode(data)
                if session_id is None or event.session_id == session_id:
                    yield Record(event, Position(topic, 0, offset))
            if on_end is not None:
                on_end(0, end)
            return
        check = Checker(self.topic_prefix)
        want = None if session_id is None else session_id.encode()
        for offset, data in file.frames(first, end):
            if want is not None:
                peek = claimed(data)
                if peek is not None and peek != want:
                    continue  # another session's: not even decoded
            try:
                event, checked = self.codec.read(data)
                # No keys in the file: the envelope's session id is the key, so only the rest is checked.
                check(event, topic, event.session_id.encode(), checked)
            except Exception as exc:
                on_bad(skipped(Position(topic, 0, offset), exc, data, None))
                continue
            if session_id is None or event.session_id == session_id:
                yield Record(event, Position(topic, 0, offset))
        if on_end is not None:
            on_end(0, end)

    async def ends(self, namespace: str) -> dict[int, int]:
        path = self.path / f"{names.topic(namespace, self.topic_prefix)}.log"
        if namespace not in self._files and not path.exists():
            return {}  # opening the file would make the log
        return {0: len(self._file(namespace).offsets)}

    def partition(self, session_id: str, partitions: int) -> int:
        return 0

    async def namespaces(self) -> list[str]:
        if not self.path.is_dir():
            return []
        prefix = self.topic_prefix + "."
        found = (p.name[len(prefix) : -len(".log")] for p in self.path.glob(f"{prefix}*.log"))
        return sorted(ns for ns in found if names.NAMESPACE_RE.fullmatch(ns))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with _open_lock:
            for f in self._files.values():
                shared, refs = _open_files[f.path]
                if refs <= 1:
                    del _open_files[f.path]
                    shared.close()
                else:
                    _open_files[f.path] = (shared, refs - 1)
        self._files.clear()


def _nth(batch: asyncio.Future[int], n: int) -> asyncio.Future[int]:
    """The offset of the `n`th frame of a batch write whose first frame's offset `batch` gives."""
    out: asyncio.Future[int] = batch.get_loop().create_future()

    def done(f: asyncio.Future[int]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
        elif (exc := f.exception()) is not None:
            out.set_exception(exc)
        else:
            out.set_result(f.result() + n)

    batch.add_done_callback(done)
    return out
