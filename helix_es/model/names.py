"""Names other programs depend on: Kafka topics, consumer groups, Redis keys, view targets and tables."""

from __future__ import annotations

import re
from collections.abc import Sequence

from helix_es.model.errors import ConfigError, InvalidInput

NAMESPACE_RE = re.compile(r"[A-Za-z0-9._-]{1,200}")
DEFAULT_TOPIC_PREFIX = "helix.memory"
MAX_SESSION_ID = 512
MAX_TOPIC = 249  # Kafka's limit on a topic name (the embedded log adds ".log" to it: still a legal file name)


def check_namespace(namespace: object, field: str = "namespace", error: type[InvalidInput] = InvalidInput) -> str:
    if not isinstance(namespace, str) or not NAMESPACE_RE.fullmatch(namespace):
        raise error(field, f"must match [A-Za-z0-9._-]{{1,200}}, got {namespace!r}")
    return namespace


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


def topic_pattern(prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    return "^" + re.escape(prefix + ".") + r"[A-Za-z0-9._-]{1,200}$"


def dlq_topic(namespace: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """Where projectors park a namespace's records they cannot use; outside the namespace pattern."""
    return f"helix.dlq.{namespace}" if prefix == DEFAULT_TOPIC_PREFIX else f"{prefix}-dlq.{namespace}"


def dlq_pattern(prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    head = "helix.dlq." if prefix == DEFAULT_TOPIC_PREFIX else prefix + "-dlq."
    return "^" + re.escape(head) + r"[A-Za-z0-9._-]{1,200}$"


def namespace_of(topic_name: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    return topic_name[len(prefix) + 1 :]


def consumer_group(view: str, store: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """One group per view and store: the same view kept in Redis and in Postgres is two views."""
    group = f"helix.projector.{store}.{view}"
    return group if prefix == DEFAULT_TOPIC_PREFIX else f"{group}.{prefix}"


def session_key(namespace: str, session_id: str, view_suffix: str = "") -> str:
    """`helix:memory:<namespace>:{<session_id>}[:<view>]`; the braces are the cluster hash tag."""
    key = f"helix:memory:{namespace}:{{{session_id}}}"
    return f"{key}:{view_suffix}" if view_suffix else key


def applied_key(namespace: str, session_id: str, view: str) -> str:
    """The offset a view last applied for one session: same hash slot as its data."""
    return f"helix:memory:{namespace}:{{{session_id}}}:{view}:applied"


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
