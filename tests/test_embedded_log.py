"""The embedded log file: framing, crash recovery, corruption, one writer.

What every log does is `tests.contracts.event_log.EventLogContract`, run here by `TestEmbeddedLog`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from helix_es import Event, LogCorrupted, Message, MessageAdded, open_memory
from helix_es.log.embedded import FRAME, MAGIC, EmbeddedLog
from helix_es.log.port import EventLog
from tests.contracts.event_log import EventLogContract, NewLog


def event(i: int, session: str = "s") -> Event:
    return Event("ns", session, MessageAdded(Message("user", f"message {i}")))


async def write(path: Path, n: int) -> Path:
    log = EmbeddedLog(path)
    positions = [await log.append(event(i)) for i in range(n)]
    assert [p.offset for p in positions] == list(range(n))
    assert {(p.topic, p.partition) for p in positions} == {("helix.memory.ns", 0)}
    await log.close()
    return path / "helix.memory.ns.log"


class TestEmbeddedLog(EventLogContract):
    @pytest.fixture
    async def new_log(self, tmp_path: Path) -> AsyncIterator[NewLog]:
        made: list[EmbeddedLog] = []

        def new() -> EventLog:
            made.append(EmbeddedLog(tmp_path / "log"))  # fsync on: appends run in a thread
            return made[-1]

        yield new
        for log in made:
            await log.close()


async def read_all(path: Path) -> list[str]:
    log = EmbeddedLog(path)
    try:
        return [r.event.payload.message.content async for r in log.read("ns")]  # type: ignore[union-attr]
    finally:
        await log.close()


def frame_starts(file: Path) -> list[int]:
    data, pos, starts = file.read_bytes(), len(MAGIC), []
    while pos < len(data):
        starts.append(pos)
        pos += FRAME.size + FRAME.unpack_from(data, pos)[0]
    return starts


@pytest.mark.parametrize("cut", ["mid-header", "mid-body", "zero-fill"])
async def test_torn_tail_is_cut_off_on_open(tmp_path: Path, cut: str) -> None:
    file = await write(tmp_path, 5)
    last = frame_starts(file)[-1]
    size = file.stat().st_size
    if cut == "mid-header":
        os.truncate(file, last + 3)
    elif cut == "mid-body":
        os.truncate(file, size - 7)
    else:  # a crash after the length was reserved but before data reached the disk
        os.truncate(file, last)
        with file.open("ab") as f:
            f.write(b"\x00" * 40)
    assert await read_all(tmp_path) == [f"message {i}" for i in range(4)]
    assert file.stat().st_size == last
    log = EmbeddedLog(tmp_path)
    assert (await log.append(event(99))).offset == 4  # the next event takes the cut one's place
    await log.close()
    assert (await read_all(tmp_path))[-1] == "message 99"


async def test_damage_before_the_tail_is_an_error_never_skipped(tmp_path: Path) -> None:
    file = await write(tmp_path, 5)
    third = frame_starts(file)[2]
    data = bytearray(file.read_bytes())
    data[third + FRAME.size + 5] ^= 0xFF
    file.write_bytes(bytes(data))
    with pytest.raises(LogCorrupted, match=rf"byte {third} \(frame 2\).*checksum"):
        await read_all(tmp_path)
    assert file.read_bytes() == bytes(data)  # nothing was cut or rewritten


async def test_not_a_log_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "helix.memory.ns.log").write_bytes(b"hello world, not a log")
    with pytest.raises(LogCorrupted, match="magic"):
        await read_all(tmp_path)


async def test_a_second_process_cannot_write_the_same_log(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path)
    await log.append(event(0))
    code = (
        "import asyncio, sys\n"
        "from helix_es.log.embedded import EmbeddedLog\n"
        "from tests.test_embedded_log import event\n"
        "async def main():\n"
        f"    await EmbeddedLog({str(tmp_path)!r}).append(event(1))\n"
        "asyncio.run(main())\n"
    )
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "in use by another process" in proc.stderr
    await log.close()
    assert await read_all(tmp_path) == ["message 0"]


async def test_memory_survives_a_restart_of_the_process(tmp_path: Path) -> None:
    cfg = {"log": {"path": str(tmp_path)}, "memory": {"type": "sliding-window", "window_size": 2, "namespace": "ns"}}
    code = (
        "import asyncio\n"
        "from helix_es import Message, open_memory\n"
        "async def main():\n"
        f"    async with open_memory({cfg!r}, session_id='s') as mem:\n"
        "        for t in ('a', 'b', 'c'):\n"
        "            await mem.add(Message('user', t))\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=Path(__file__).resolve().parent.parent)
    async with open_memory(cfg, session_id="s") as mem:
        assert [m.content for m in await mem.get()] == ["b", "c"]
