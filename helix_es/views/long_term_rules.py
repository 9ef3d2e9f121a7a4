"""Long-term memory projections: a namespace's messages, across sessions, folded from the log.

One projection per store (`memory.MemoryLongTerm`, `redis.RedisLongTerm`,
`postgres.PostgresLongTerm`); they share the rules below, so a view rebuilt from the log is
the same in every store and under every delivery order.

- **Scope.** Messages belong to the namespace (the agent id). Each keeps the session id that
  wrote it and its event time, for audit; `get` does not return them (a `Message` has no such
  fields).
- **Order.** A namespace's events spread over partitions with no total order, so `get` orders
  by event time, then topic, partition and offset (`order_key`): every projector agrees,
  whatever it applied first. Event times are the producers' clocks.
- **Clear.** A `MemoryCleared` from any session clears the whole namespace (the seed's
  `LongTermMemory.Clear` deletes everything of the agent). Each namespace keeps a `cleared_at`
  watermark, the latest clear time applied: a clear deletes every message with time <= it, and
  a message with time <= the watermark is never inserted. So the view is "the messages newer
  than the newest clear" whichever order partitions are applied in. A message stamped at or
  before a clear by a producer whose clock runs behind is cleared with it: the price of a
  deterministic view without a total order.
- **Erasure.** A `SessionErased` (`helix-es forget`) deletes every row of its session written
  before it: the rows of that session except those after it on its own partition (a session's
  events share one partition, the one its key hashes to, so offsets order them). It is applied
  atomically with the checkpoint, or before it, and deleting twice deletes nothing more, so a
  re-delivery is safe and a replay of the log ends without the session's erased rows.
- **Idempotence.** `apply` gets one topic-partition's records, skips those at or below the
  stored checkpoint of (view, topic, partition), and writes rows, watermark and checkpoint in
  one atomic step. Rows are keyed by (namespace, topic, partition, offset), so even a
  re-delivery past a lost checkpoint inserts nothing twice; inserts are idempotent and the
  watermark only grows, so the fold also commutes between partitions.
- **Read-your-writes.** `get`/`search` with a `want` position answer None until the checkpoint of
  (view, want.topic, want.partition) reaches want.offset, read in the same round trip as the data.
- **Search.** Case-insensitive substring of `content`, oldest first, at most `limit`: Python's
  `casefold` in memory and Redis, `ILIKE` (wildcards escaped) in PostgreSQL, whose case folding
  follows the database's collation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from helix_es.model.events import MemoryCleared, MessageAdded, Record, SessionErased
from helix_es.model.message import Message

VIEW_NAME = "long-term"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

OrderKey = tuple[int, str, int, int]  # (event time in µs, topic, partition, offset)


def micros(at: datetime) -> int:
    """Microseconds since the Unix epoch, exactly (the wire's timestamp-micros)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)  # the codec decodes UTC; a naive time from elsewhere is taken as UTC
    return (at - _EPOCH) // _MICROSECOND



@dataclass(frozen=True, slots=True)
class Op:
    """One record as the long-term view sees it: a message to keep, a clear, or nothing to do."""

    record: Record
    message: Message | None  # MessageAdded
    clear: bool  # MemoryCleared

    @property
    def offset(self) -> int:
        return self.record.position.offset

    @property
    def namespace(self) -> str:
        return self.record.event.namespace

    @property
    def session_id(self) -> str:
        return self.record.event.session_id

    @property
    def at(self) -> datetime:
        return self.record.event.timestamp

    @property
    def order(self) -> OrderKey:
        p = self.record.position
        return (micros(self.at), p.topic, p.partition, p.offset)

    @property
    def erased(self) -> bool:
        """SessionErased: the session's rows written before it leave the view."""
        return isinstance(self.record.event.payload, SessionErased)

    def erases(self, session_id: str, topic: str, partition: int, offset: int) -> bool:
        """Whether this erasure removes the row of `session_id` at (topic, partition, offset)."""
        p = self.record.position
        return session_id == self.session_id and not (
            (topic, partition) == (p.topic, p.partition) and offset > p.offset
        )


def ops(records: Sequence[Record]) -> tuple[str, int, list[Op]]:
    """The batch's topic-partition and its records as ops; refuses a batch that mixes partitions."""
    topic, partition = records[0].position.topic, records[0].position.partition
    out = []
    for r in records:
        if (r.position.topic, r.position.partition) != (topic, partition):
            raise ValueError(f"a batch holds one topic-partition: {topic}[{partition}], then {r.position}")
        payload = r.event.payload
        message = payload.message if isinstance(payload, MessageAdded) else None
        out.append(Op(r, message, isinstance(payload, MemoryCleared)))
    return topic, partition, out


def matches(needle: str, content: str) -> bool:
    """The memory and Redis stores' search test; `needle` is already casefolded."""
    return needle in content.casefold()


def escape_like(query: str) -> str:
    r"""An ILIKE pattern matching `query` literally anywhere: `\`, `%` and `_` escaped with `\`."""
    escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
