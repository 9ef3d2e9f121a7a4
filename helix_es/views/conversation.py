"""conversation: the whole history of a session, until it is cleared."""

from __future__ import annotations

from dataclasses import dataclass

from helix_es.message import Message
from helix_es.views import State, View


@dataclass(frozen=True)
class Conversation(View):
    kind = "conversation"

    @property
    def key_suffix(self) -> str:
        return ""  # the plain session key: helix:memory:<namespace>:{<session_id>}

    def added(self, state: State, message: Message) -> State:
        return (*state, message)
