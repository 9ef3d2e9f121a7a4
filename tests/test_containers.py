"""The Testcontainers path of the fixtures, proven rather than assumed.

`scripts/ci-docker` runs a part of the suite with no HELIX_* service variables, a Docker
engine and HELIX_EXPECT_TESTCONTAINERS=1: then every service must have come from a
container of the image its HELIX_*_IMAGE variable names, or the run fails.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import IMAGES, SERVED, image

EXPECT = os.environ.get("HELIX_EXPECT_TESTCONTAINERS") == "1"


def test_images_default_to_the_official_ones_and_follow_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for service, (var, default) in IMAGES.items():
        monkeypatch.delenv(var, raising=False)
        assert image(service) == default
        monkeypatch.setenv(var, f"local/{service}:1")
        assert image(service) == f"local/{service}:1"


async def test_every_service_came_from_testcontainers_when_expected(
    kafka_bootstrap: str, redis_url: str, postgres_dsn: str
) -> None:
    if not EXPECT:
        pytest.skip(
            "only in the Docker CI step (scripts/ci-docker sets HELIX_EXPECT_TESTCONTAINERS=1): allowed to "
            "skip, even under HELIX_REQUIRE_SERVICES=1"
        )
    served = dict(SERVED)
    assert served == {service: image(service) for service in IMAGES}, served


async def test_the_containers_serve(kafka_bootstrap: str, redis_url: str, postgres_dsn: str) -> None:
    """Each endpoint answers a real request, whichever path served it."""
    import asyncpg
    from aiokafka.admin import AIOKafkaAdminClient
    from redis.asyncio import Redis

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        assert len((await admin.describe_cluster())["brokers"]) >= 1
    finally:
        await admin.close()
    client = Redis.from_url(redis_url)
    try:
        assert await client.ping()
    finally:
        await client.aclose()
    conn = await asyncpg.connect(postgres_dsn)
    try:
        assert await conn.fetchval("select 1") == 1
    finally:
        await conn.close()
