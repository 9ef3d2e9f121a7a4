"""Names other programs depend on: Kafka topics, consumer groups, Redis keys, view targets and tables."""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Sequence

from helix_es.model.errors import ConfigError, InvalidInput

NAMESPACE_RE = re.compile(r"[A-Za-z0-9._-]{1,200}")
_CHAR = "[A-Za-z0-9._-]"
# A namespace pattern (projectors only): fnmatch's `*`, `?`, `[...]` and `[!...]` over the namespace charset.
_GLOB_TOKEN = re.compile(rf"\*|\?|\[!?{_CHAR}+\]|{_CHAR}+")
DEFAULT_TOPIC_PREFIX = "helix.memory"
MAX_SESSION_ID = 512
MAX_TOPIC = 249  # Kafka's limit on a topic name (the embedded log adds ".log" to it: still a legal file name)


def check_namespace(namespace: object, field: str = "namespace", error: type[InvalidInput] = InvalidInput) -> str:
    if not isinstance(namespace, str) or not NAMESPACE_RE.fullmatch(namespace):
        raise error(field, f"must match [A-Za-z0-9._-]{{1,200}}, got {namespace!r}")
    return namespace


def is_pattern(namespace: str) -> bool:
    """A glob (`*`, `tenant-*`) rather than one namespace: no namespace holds these characters."""
    return any(c in namespace for c in "*?[")


def check_namespace_pattern(
    namespace: object, field: str = "namespace", error: type[InvalidInput] = InvalidInput
) -> str:
    """A namespace, or a glob of them (what a projector config may name)."""
    if not isinstance(namespace, str) or not is_pattern(namespace):
        return check_namespace(namespace, field, error)
    tokens = _GLOB_TOKEN.findall(namespace)
    if len(namespace) > 200 or "".join(tokens) != namespace:
        raise error(field, f"a namespace pattern is a glob (*, ?, [...]) over [A-Za-z0-9._-], got {namespace!r}")
    try:
        re.compile(_glob_regex(namespace))
    except re.error as exc:  # e.g. a range written backwards, [z-a]
        raise error(field, f"is not a usable glob ({exc}), got {namespace!r}") from None
    return namespace


def concrete_namespace(namespace: str, field: str = "namespace", error: type[InvalidInput] = InvalidInput) -> str:
    """`namespace`, refused if it is a pattern: a client reads and writes one namespace."""
    if is_pattern(namespace):
        raise error(
            field,
            f"is the pattern {namespace!r}, which only projectors serve; clients open one concrete "
            "namespace: set it (or pass namespace=/--namespace)",
        )
    return check_namespace(namespace, field, error)


def _glob_regex(glob: str) -> str:
    out = []
    for token in _GLOB_TOKEN.findall(glob):
        if token == "*":
            out.append(_CHAR + "*")
        elif token == "?":
            out.append(_CHAR)
        elif token.startswith("[!"):
            out.append("[^" + token[2:])  # the lookahead in `topic_pattern` keeps it to the charset
        elif token.startswith("["):
            out.append(token)  # charset characters only: `.` is literal and `-` a range, as in fnmatch
        else:
            out.append(re.escape(token))
    return "".join(out)


def namespace_matcher(namespaces: Iterable[str]) -> re.Pattern[str]:
    """Matches the namespaces named (exactly) or matched by a glob among `namespaces`."""
    alternatives = "|".join(re.escape(n) if not is_pattern(n) else _glob_regex(n) for n in sorted(set(namespaces)))
    return re.compile(rf"(?={_CHAR}{{1,200}}$)(?:{alternatives})$")


def check_session_id(session_id: object, field: str = "session_id", error: type[InvalidInput] = InvalidInput) -> str:
    # Braces would break the Redis Cluster hash tag that keeps a session's keys in one slot.
    if not isinstance(session_id, str) or not session_id:
        raise error(field, f"must be a non-empty string, got {session_id!r}")
    if len(session_id) > MAX_SESSION_ID:
        raise error(field, f"is longer than {MAX_SESSION_ID} characters")
    if not session_id.isprintable() or "{" in session_id or "}" in session_id:
        raise error(field, f"must be printable text without braces, got {session_id!r}")
    if session_id.isspace():
        raise error(field, f"must not be blank, got {session_id!r}")
    return session_id


def topic_name(namespace: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """`<prefix>.<namespace>`, unchecked."""
    return f"{prefix}.{namespace}"


def topic(namespace: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    name = topic_name(check_namespace(namespace), prefix)
    if len(name) > MAX_TOPIC:
        raise InvalidInput(
            "namespace",
            f"makes topic {name[:40]}... {len(name)} characters long, over Kafka's "
            f"{MAX_TOPIC}: shorten the namespace or the topic prefix",
        )
    return name


def longest_topic(namespace: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> int:
    """The longest of a namespace's topic names (its log, dead letters, uses); 0 for a pattern (it names none)."""
    if is_pattern(namespace):
        return 0
    return max(
        len(topic_name(namespace, prefix)), len(dlq_topic(namespace, prefix)), len(uses_topic(namespace, prefix))
    )


def topic_pattern(prefix: str = DEFAULT_TOPIC_PREFIX, namespaces: Iterable[str] | None = None) -> str:
    """The topics of `namespaces` (names and globs), or of every namespace when None."""
    if namespaces is None:
        return "^" + re.escape(prefix + ".") + r"[A-Za-z0-9._-]{1,200}$"
    wanted = sorted(set(namespaces))
    if not wanted:
        raise ValueError("a topic pattern needs at least one namespace")
    return "^" + re.escape(prefix + ".") + namespace_matcher(wanted).pattern


def dlq_topic(namespace: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """Where projectors park a namespace's records they cannot use; outside the namespace pattern."""
    return f"helix.dlq.{namespace}" if prefix == DEFAULT_TOPIC_PREFIX else f"{prefix}-dlq.{namespace}"


def uses_topic(namespace: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """Where clients on Kafka tell a namespace's forgetting policies what their reads returned."""
    return f"helix.uses.{namespace}" if prefix == DEFAULT_TOPIC_PREFIX else f"{prefix}-uses.{namespace}"


def dlq_pattern(prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    head = "helix.dlq." if prefix == DEFAULT_TOPIC_PREFIX else prefix + "-dlq."
    return "^" + re.escape(head) + r"[A-Za-z0-9._-]{1,200}$"


def namespace_of(topic_name: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    return topic_name[len(prefix) + 1 :]


SHARDS = 64  # a view's partitions are dealt to at most this many projector processes


def shards_topic(prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """The empty topic whose partitions (shards) a view's projector processes share in its consumer group."""
    return "helix.projector.shards" if prefix == DEFAULT_TOPIC_PREFIX else f"{prefix}-shards"


def shard_of(topic: str, partition: int, shards: int) -> int:
    """The shard a topic-partition belongs to: a topic's partitions on consecutive shards, so a group's
    round-robin deal of the shards spreads one namespace's partitions over its processes."""
    return (zlib.crc32(topic.encode()) + partition) % shards


def consumer_group(view: str, store: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """One group per view and store: the same view kept in Redis and in Postgres is two views."""
    group = f"helix.projector.{store}.{view}"
    return group if prefix == DEFAULT_TOPIC_PREFIX else f"{group}.{prefix}"


def rebuild_group(target: str, store: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """The consumer group a rebuild into `target` shares its partitions through (`helix-es rebuild --group`
    and its `--join` members): one per target and store, apart from the projectors' groups."""
    group = f"helix.rebuild.{store}.{target}"
    return group if prefix == DEFAULT_TOPIC_PREFIX else f"{group}.{prefix}"


def session_key(namespace: str, session_id: str, view_suffix: str = "") -> str:
    """`helix:memory:<namespace>:{<session_id>}[:<view>]`; the braces are the cluster hash tag."""
    key = f"helix:memory:{namespace}:{{{session_id}}}"
    return f"{key}:{view_suffix}" if view_suffix else key


def applied_key(namespace: str, session_id: str, view: str) -> str:
    """The offset a view last applied for one session: same hash slot as its data."""
    return f"helix:memory:{namespace}:{{{session_id}}}:{view}:applied"


def idempotency_key_name(namespace: str, session_id: str, view: str) -> str:
    """Sorted set of a session's idempotency keys (score: the offset of each one's first event)."""
    return f"helix:memory:{namespace}:{{{session_id}}}:{view}:idempotency"


def checkpoint_key(view: str) -> str:
    """Hash of `<topic>:<partition>` -> last applied offset, for one view."""
    return f"helix:checkpoint:{view}"


# --- view targets and their aliases (`helix-es rebuild`) ---

TARGET_RE = re.compile(r"[A-Za-z0-9._@+-]{1,240}")  # no `:` (the alias separator), braces or spaces
_VERSION_RE = re.compile(r"@v(\d+)$")


def alias_id(view: str, topic_prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """The alias of a view in one deployment: `<view>`, or `<view>:<topic_prefix>` for another prefix."""
    return view if topic_prefix == DEFAULT_TOPIC_PREFIX else f"{view}:{topic_prefix}"


def alias_key(alias: str) -> str:
    return f"helix:alias:{alias}"


def targets_key(alias: str) -> str:
    return f"helix:targets:{alias}"


def check_target(target: object, field_name: str = "--into") -> str:
    if not isinstance(target, str) or not TARGET_RE.fullmatch(target):
        raise ConfigError(field_name, f"a target name matches [A-Za-z0-9._@+-]{{1,240}}, got {target!r}")
    return target


def version_of(view: str, target: str) -> int:
    """`sliding-window-30@v3` -> 3; the view's own name is version 1; other names 0."""
    if target == view:
        return 1
    m = _VERSION_RE.search(target)
    return int(m.group(1)) if m and target[: m.start()] == view else 0


def next_target(view: str, known: Sequence[str]) -> str:
    """`<view>@v<N>`, N one past every version built so far (the view's own name counts as v1)."""
    return f"{view}@v{max([1, *(version_of(view, t) for t in known)]) + 1}"


def served_key(alias: str) -> str:
    return f"helix:served:{alias}"
