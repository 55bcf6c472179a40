"""The model-based contract check (``contract.harness``) over RedisBackend with short real TTLs:
200 examples, Redis's own expiry, real time passing (well under a minute)."""

from __future__ import annotations

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from contract.harness import (
    Store,
    Timing,
    machine_class,
    real_timing,
    redis_store,
    run_machine,
    unique_prefix,
)

pytestmark = pytest.mark.live

TTL_MS = st.sampled_from([50, 100, 150, 200])
ADVANCE_MS = st.sampled_from([0, 5, 20, 45, 70])

REDIS_SETTINGS = settings(
    max_examples=200,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_redis_backend_follows_the_model(redis_client: redis.Redis) -> None:
    """RedisBackend with real 50-200 ms TTLs never departs from the lease model in 200 runs."""
    runs: list[None] = []

    def open_store() -> tuple[Store, Timing]:
        runs.append(None)
        # A fresh prefix per run: its counters start at zero, as the model's do.
        return redis_store(redis_client, unique_prefix()), real_timing(slack_ms=5)

    machine = machine_class("RedisMachine", open_store, TTL_MS, ADVANCE_MS)
    run_machine(machine, REDIS_SETTINGS)
    assert len(runs) >= 200
