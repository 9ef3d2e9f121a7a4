"""smart: a token budget for tool-heavy agents (coding, RAG, analysis).

- Tokens, not turns: large tool results count for what they cost (`message_tokens`, estimated,
  or exact with `tokenizer: cl100k_base | o200k_base`).
- An assistant message with tool calls and the tool messages answering it form one group,
  evicted together, oldest first, so a call is never left without its result or the reverse.
  The newest group always stays.
- An evicted group that held tool results leaves a short compressed note in its place
  (a system message, `metadata["helix.smart"] = "compressed"`); notes go only when the
  notes alone no longer fit.
- A file context map remembers, for every path a tool call read or wrote, a one-line
  summary, even after the call is evicted; `get` shows it as a system message after the
  first system message (which, as in the windows, always stays and is not counted).

The state is the pinned system message (if any), the file map message (if any), then the
items (messages and notes) in order. The fold is pure: the same events give the same state.

A retraction takes back the newest real message (not a note, not the pinned system message); with
none left it changes nothing. A retracted tool result also takes back the file map entries it wrote, when they are
still its own; what a path's entry said before is not brought back, as an evicted message is not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from helix_es.model.errors import ConfigError
from helix_es.model.message import Message
from helix_es.model.tokenizers import ESTIMATE
from helix_es.model.tokens import message_tokens
from helix_es.views.base import State, View
from helix_es.views.token_window import check_exact, tokenizer_suffix
from helix_es.views.units import orphan, units

DEFAULT_TOKENS = 100_000
ROLE = "helix.smart"
FILES = "helix.smart.files"  # JSON {path: summary} on the file map message
PATH_KEYS = ("path", "file", "file_path", "filepath", "filename", "target_file", "source", "destination")
LIST_KEYS = ("paths", "files")
_WRITES = re.compile(r"write|edit|create|save|patch|append|update|replace|move|rename", re.I)
_DELETES = re.compile(r"delete|remove|unlink|rm\b", re.I)


def _gist(text: str, tokenizer: str, limit: int = 120) -> str:
    lines = text.splitlines()
    first = next((line.strip() for line in lines if line.strip()), "")
    first = first if len(first) <= limit else first[: limit - 1] + "…"
    tokens = message_tokens(Message("tool", text, tool_call_id="x"), tokenizer)
    return f"{first!r} ({len(lines)} lines, ~{tokens} tokens)"


def _paths(arguments: str) -> list[str]:
    try:
        args = json.loads(arguments)
    except ValueError:
        return []
    if not isinstance(args, dict):
        return []
    found = [args[k] for k in PATH_KEYS if isinstance(args.get(k), str) and args[k]]
    for k in LIST_KEYS:
        if isinstance(args.get(k), list):
            found += [p for p in args[k] if isinstance(p, str) and p]
    return found


@dataclass(frozen=True, slots=True)
class Parts:
    pinned: Message | None
    files: dict[str, str]
    items: tuple[Message, ...]


def split(state: State) -> Parts:
    pinned = files = None
    rest = list(state)
    if rest and rest[0].role == "system" and ROLE not in rest[0].metadata:
        pinned = rest.pop(0)
    if rest and rest[0].metadata.get(ROLE) == "files":
        files = rest.pop(0)
    return Parts(pinned, json.loads(files.metadata[FILES]) if files else {}, tuple(rest))


def join(parts: Parts) -> State:
    head: list[Message] = [parts.pinned] if parts.pinned else []
    if parts.files:
        listing = "\n".join(f"- {path}: {summary}" for path, summary in parts.files.items())
        head.append(
            Message(
                "system",
                "Files in context (path: last known state):\n" + listing,
                metadata={ROLE: "files", FILES: json.dumps(parts.files, sort_keys=True)},
            )
        )
    return (*head, *parts.items)


def _note(group: tuple[Message, ...], tokenizer: str) -> Message | None:
    """The compressed trace an evicted group leaves, if it held tool results."""
    calls = {c.id: c for m in group for c in m.tool_calls}
    results = [m for m in group if m.role == "tool"]
    if not results:
        return None
    lines = []
    for r in results:
        call = calls.get(r.tool_call_id or "")
        what = f"{call.name}({call.arguments})" if call else f"tool call {r.tool_call_id}"
        lines.append(f"{what[:160]} -> {_gist(r.content, tokenizer)}")
    return Message("system", "Earlier tool results (compressed):\n" + "\n".join(lines), metadata={ROLE: "compressed"})


@dataclass(frozen=True)
class Smart(View):
    kind = "smart"
    max_tokens: int = DEFAULT_TOKENS
    tokenizer: str = field(default=ESTIMATE, kw_only=True)  # estimate | cl100k_base | o200k_base

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 0:
            raise ConfigError("max_tokens", f"must be a whole number >= 0 (0: the default), got {self.max_tokens!r}")
        if self.max_tokens == 0:
            object.__setattr__(self, "max_tokens", DEFAULT_TOKENS)
        check_exact(self.tokenizer)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.max_tokens}{tokenizer_suffix(self.tokenizer)}"

    def added(self, state: State, message: Message) -> State:
        parts = split(state)
        if orphan(parts.items, message):
            return state  # its call was compressed away
        if message.role == "system" and parts.pinned is None and not parts.items:
            return join(Parts(message, parts.files, ()))
        files = dict(parts.files)
        for path, entry in self._entries(parts.items, message).items():
            files.pop(path, None)  # re-insert: the map lists files by last touch
            files[path] = entry
        return join(self._fit(Parts(parts.pinned, files, (*parts.items, message))))

    def retracted(self, state: State) -> State:
        parts = split(state)
        items = parts.items
        last = next((i for i in range(len(items) - 1, -1, -1) if items[i].metadata.get(ROLE) != "compressed"), None)
        if last is None:
            return state  # what it held is gone: the rest was evicted (or is the pinned message)
        before = items[:last]
        files = {
            path: entry
            for path, entry in parts.files.items()
            if self._entries(before, items[last]).get(path) != entry  # still the retracted result's own entry
        }
        return join(Parts(parts.pinned, files, (*before, *items[last + 1 :])))

    def _entries(self, items: tuple[Message, ...], message: Message) -> dict[str, str]:
        """The file map entries a tool result writes, by path (none for other messages)."""
        if message.role != "tool":
            return {}
        call = next((c for m in reversed(items) for c in m.tool_calls if c.id == message.tool_call_id), None)
        if call is None:
            return {}
        verb = "deleted" if _DELETES.search(call.name) else "wrote" if _WRITES.search(call.name) else "read"
        entry = f"{verb} via {call.name}: {_gist(message.content, self.tokenizer)}"
        return dict.fromkeys(_paths(call.arguments), entry)

    def _tokens(self, message: Message) -> int:
        return message_tokens(message, self.tokenizer)

    def _fit(self, parts: Parts) -> Parts:
        count = self._tokens
        budget = self.max_tokens - sum(map(count, join(Parts(None, parts.files, ()))))
        items = list(parts.items)
        used = sum(map(count, items))
        while used > budget:
            groups = list(units(items))
            plain = [g for g in groups[:-1] if items[g[0]].metadata.get(ROLE) != "compressed"]
            if plain:  # evict the oldest real group, leaving a note for its tool results
                start, end = plain[0]
                note = _note(tuple(items[start:end]), self.tokenizer)
                replacement = [note] if note is not None and count(note) < used else []
            else:  # only notes and the newest group are left: the oldest note goes
                notes = [g for g in groups[:-1]]
                if not notes:
                    break  # the newest group alone is over budget: it stays, as in the windows
                (start, end), replacement = notes[0], []
            used += sum(map(count, replacement)) - sum(map(count, items[start:end]))
            items[start:end] = replacement
        return Parts(parts.pinned, parts.files, tuple(items))
