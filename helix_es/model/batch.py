"""A batch of messages for `add_many`, checked whole before anything is written."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from helix_es.model.errors import InvalidInput, InvalidMessage
from helix_es.model.events import check_idempotency_key
from helix_es.model.message import Message, check_size


def check_batch(
    messages: Iterable[Message],
    idempotency_keys: Sequence[str | None] | None = None,
    *,
    max_content_bytes: int | None = None,
) -> tuple[list[Message], list[str | None]]:
    """The messages and one key (or None) each. A bad one raises naming its index (`messages[3].content`,
    `idempotency_keys[3]`), so a caller writes nothing of a batch with one bad message in it."""
    if isinstance(messages, (str, bytes, Message)) or not isinstance(messages, Iterable):
        raise InvalidMessage("messages", f"must be a list of helix_es.Message, got {type(messages).__name__}")
    batch = list(messages)
    for i, message in enumerate(batch):
        if not isinstance(message, Message):
            raise InvalidMessage(f"messages[{i}]", f"must be a helix_es.Message, got {type(message).__name__}")
        try:
            message.check()  # a message built around Message() (from_record) is checked too
            if max_content_bytes is not None:
                check_size(message, max_content_bytes)
        except InvalidInput as exc:
            raise InvalidMessage(f"messages[{i}].{exc.field}", exc.problem) from None
    if idempotency_keys is None:
        return batch, [None] * len(batch)
    if isinstance(idempotency_keys, (str, bytes)) or not isinstance(idempotency_keys, Sequence):
        raise InvalidInput("idempotency_keys", "must be a list with one key (or None) per message")
    if len(idempotency_keys) != len(batch):
        raise InvalidInput(
            "idempotency_keys", f"has {len(idempotency_keys)} keys for {len(batch)} messages: give one per message"
        )
    keys = []
    for i, key in enumerate(idempotency_keys):
        try:
            keys.append(check_idempotency_key(key))
        except InvalidInput as exc:
            raise InvalidInput(f"idempotency_keys[{i}]", exc.problem) from None
    return batch, keys
