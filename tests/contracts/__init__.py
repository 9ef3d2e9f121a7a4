"""Conformance suites, one per port: what every adapter of that port must do.

Each module holds a plain class (its name does not start with `Test`, so pytest does not collect
it alone) of async tests written against the port only, and abstract fixtures that raise
`NotImplementedError`. An adapter's test module subclasses it and overrides the fixtures:

    class TestRedisViewStore(ViewStoreContract):
        @pytest.fixture
        async def store(self, redis_url: str) -> AsyncIterator[ViewStore]:
            ...

so every adapter runs the same tests against its real service (tests/conftest.py).
"""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

Store = TypeVar("Store", bound=Any)


@asynccontextmanager
async def each_closed(make: Callable[[], Store]) -> AsyncIterator[Callable[[], Store]]:
    """A factory of adapters over one place (a test opens several, as several projectors would),
    every one it made closed at the end."""
    made: list[Store] = []

    def new() -> Store:
        made.append(make())
        return made[-1]

    try:
        yield new
    finally:
        for store in made:
            await store.close()
