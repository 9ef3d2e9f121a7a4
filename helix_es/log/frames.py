"""The embedded log's file format, written and read here only.

A file is an 8-byte magic, then frames of `length (u32 BE) | crc32 (u32 BE) | event`; frame N
is the event at offset N of partition 0. `LogFile` (`helix_es.log.embedded`), the file's one
writer, appends with `encode` and checks frames with `problem`; `TailReader` reads a file
without the writer's lock while its owner keeps appending (a rebuild, `helix_es.log.replay`).
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

from helix_es.log.port import MAX_EVENT_BYTES
from helix_es.model.errors import LogCorrupted

MAGIC = b"HXLOG\x00\x01\n"
FRAME = struct.Struct(">II")  # the header: length and crc32 of the event bytes that follow


def encode(data: bytes) -> bytes:
    """One frame: the header, then the event's bytes."""
    return FRAME.pack(len(data), zlib.crc32(data)) + data


def intact(data: bytes, crc: int) -> bool:
    """The event bytes match their header's checksum."""
    return zlib.crc32(data) == crc


def problem(fd: int, pos: int, size: int) -> str | None:
    """What is wrong with the frame at byte `pos` of the file `fd` of `size` bytes; None: it is whole."""
    head = os.pread(fd, FRAME.size, pos)
    if len(head) < FRAME.size:
        return "a partial frame header"
    length, crc = FRAME.unpack(head)
    if length == 0 or length > MAX_EVENT_BYTES:
        return f"an impossible frame length {length}"
    if pos + FRAME.size + length > size:
        return "a frame cut short"
    if not intact(os.pread(fd, length, pos + FRAME.size), crc):
        return "a checksum mismatch"
    return None


def length_at(fd: int, pos: int) -> int:
    """The length of the event in the (checked) frame at byte `pos`."""
    length: int = FRAME.unpack(os.pread(fd, FRAME.size, pos))[0]
    return length


def read_at(fd: int, pos: int) -> bytes:
    """The event bytes of the (checked) frame at byte `pos`."""
    return os.pread(fd, length_at(fd, pos), pos + FRAME.size)


class TailReader:
    """One log file, read from the front without its writer's lock: the serving process keeps appending."""

    def __init__(self, path: Path, topic: str) -> None:
        self.path = path
        self.topic = topic
        self.file = open(path, "rb", buffering=1 << 20)  # noqa: SIM115 (closed by close())
        if self.file.read(len(MAGIC)) != MAGIC:
            self.file.close()
            raise LogCorrupted(f"{path} is not a helix-es log (bad magic)")
        self.pos = len(MAGIC)  # byte position of the next frame
        self.index = 0  # its offset
        self.bad: int | None = None  # a complete frame whose checksum fails: corrupt unless it heals

    def skip(self, start: int) -> None:
        """Move past the frames before offset `start`, reading only their headers."""
        f = self.file
        f.seek(self.pos)
        while self.index < start:
            head = f.read(FRAME.size)
            if len(head) < FRAME.size:
                break
            length = FRAME.unpack(head)[0]
            if self.pos + FRAME.size + length > os.fstat(f.fileno()).st_size:
                break
            f.seek(length, os.SEEK_CUR)
            self.pos += FRAME.size + length
            self.index += 1

    def frames(self, limit: int) -> list[tuple[int, bytes]]:
        """Up to `limit` whole frames from the read position, as (offset, event bytes); consumed."""
        f = self.file
        f.seek(self.pos)
        out: list[tuple[int, bytes]] = []
        while len(out) < limit:
            head = f.read(FRAME.size)
            if len(head) < FRAME.size:
                break
            length, crc = FRAME.unpack(head)
            data = f.read(length)
            if len(data) < length:
                break  # still being appended
            if not intact(data, crc):
                self.bad = self.pos
                break
            self.bad = None
            out.append((self.index, data))
            self.pos += FRAME.size + length
            self.index += 1
        return out

    def ready(self) -> bool:
        """A whole frame waits at the read position (it is not consumed)."""
        f = self.file
        f.seek(self.pos)
        head = f.read(FRAME.size)
        if len(head) < FRAME.size or self.bad == self.pos:
            return False
        length: int = FRAME.unpack(head)[0]
        return self.pos + FRAME.size + length <= os.fstat(f.fileno()).st_size

    def remaining_bytes(self) -> int:
        return max(0, os.fstat(self.file.fileno()).st_size - self.pos)

    def close(self) -> None:
        self.file.close()
