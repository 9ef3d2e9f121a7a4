"""The Kafka client's failures, as the rest of helix-es sees them: `KafkaUnavailable`, or transient."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from helix_es.model.errors import HelixError


class KafkaUnavailable(HelixError):
    """The brokers did not answer, or gave up on a write. An `add` that raised this may have landed
    (a broker can fail after writing): retrying it is safe, and with an idempotency key shows once."""


def transient(exc: BaseException) -> bool:
    """A Kafka failure that waiting cures: the brokers away, a lost connection or a timeout, or any error
    the client itself calls retriable."""
    if isinstance(exc, KafkaUnavailable | KafkaConnectionError | KafkaTimeoutError):
        return True
    return isinstance(exc, KafkaError) and bool(exc.retriable)


@contextlib.contextmanager
def unavailable(message: Callable[[Exception], str]) -> Iterator[None]:
    """Any error of the Kafka client raised inside becomes `KafkaUnavailable(message(error))`, caused by it."""
    try:
        yield
    except KafkaError as exc:
        raise KafkaUnavailable(message(exc)) from exc
