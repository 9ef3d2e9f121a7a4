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
