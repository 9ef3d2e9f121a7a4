"""Audit in clear for whoever holds the key: stored messages opened with the deployment's keys.

With `memory_middleware: [encryption]` the log holds `helix-enc:v1:...` envelopes. An operator who
has the key the middleware uses (`HELIX_ENCRYPTION_KEY`, or the key store `HELIX_KEY_STORE` names)
reads the history as the agent wrote it; `raw` (`helix-es audit --raw`) shows what is stored.
Erased sessions stay erased: their data keys are destroyed, so nothing can open them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from helix_es.client.encryption import EncryptedMemory, EncryptionError
from helix_es.client.runtime import Runtime, default_runtime
from helix_es.config import Config
from helix_es.model.errors import ConfigError
from helix_es.model.message import Message

ENCRYPTION = "encryption"  # the middleware's registered name

Opener = Callable[[Message], Message]


class _NoMemory:
    """The opener reads no memory: it only opens the messages it is given."""


async def opener(
    cfg: Config, namespace: str, session_id: str, stored: Sequence[Message], runtime: Runtime | None = None
) -> Opener | str | None:
    """How to open `session_id`'s stored messages: None if `cfg` seals nothing; a reason if it cannot.

    A message that does not open (sealed with a key no longer held, another session's message in a
    namespace-wide view, plaintext from before encryption) comes back as stored.
    """
    if ENCRYPTION not in cfg.middleware:
        return None
    try:
        keys = (runtime or default_runtime()).keys()
        memory = EncryptedMemory(
            _NoMemory(),  # type: ignore[arg-type]  # it is never read
            keys,
            namespace=namespace,
            session_id=session_id,
            accept_plaintext=True,
        )
        await memory._prepare(list(stored))  # a key store's provider loads the session's keys first
    except (ConfigError, EncryptionError) as exc:
        return f"stored messages shown sealed: {exc}"

    def open_(message: Message) -> Message:
        try:
            return memory.decrypt(message)
        except EncryptionError:
            return message

    return open_
