"""Argument validation: every bad value is refused with the argument and the bound named."""

from __future__ import annotations

import math
from typing import NoReturn

import pytest

from fencedlease import LeaseManager, ValidationError
from fencedlease._core.validate import MAX_MS, check_heartbeat_ms, check_key, check_ms


@pytest.mark.parametrize("value", [0, -5, 0.5, True, False, math.nan, 2**31, None, "100", 1.0])
def test_ttl_ms_refuses(value: object) -> None:
    """ttl_ms must be an int in 1..2**31-1; bool, float, NaN, None and strings are refused."""
    with pytest.raises(ValidationError, match="ttl_ms") as info:
        check_ms("ttl_ms", value, 1)
    assert info.value.argument == "ttl_ms"
    assert isinstance(info.value, ValueError)


def test_bounds_are_named_in_the_message() -> None:
    """The message states both bounds."""
    with pytest.raises(ValidationError, match=r"between 1 and 2147483647 milliseconds; got 0"):
        check_ms("ttl_ms", 0, 1)


def test_accepts_the_extremes() -> None:
    """1 and 2**31-1 are valid TTLs; 0 is a valid wait."""
    assert check_ms("ttl_ms", 1, 1) == 1
    assert check_ms("ttl_ms", MAX_MS, 1) == 2_147_483_647
    assert check_ms("wait_ms", 0, 0) == 0


@pytest.mark.parametrize(
    ("argument", "value"), [("wait_ms", -1), ("retry_delay_ms", 0), ("wait_ms", 2**31)]
)
def test_wait_and_retry_delay_bounds(argument: str, value: int) -> None:
    """wait_ms >= 0 and retry_delay_ms >= 1."""
    with pytest.raises(ValidationError, match=argument):
        check_ms(argument, value, 0 if argument == "wait_ms" else 1)


def test_heartbeat_default_is_a_quarter_of_ttl() -> None:
    """heartbeat_ms defaults to max(1, ttl_ms // 4)."""
    assert check_heartbeat_ms(None, 10_000) == 2_500
    assert check_heartbeat_ms(None, 3) == 1


def test_heartbeat_false_disables_renewal() -> None:
    """heartbeat_ms=False turns renewal off."""
    assert check_heartbeat_ms(False, 10_000) is False


def test_heartbeat_at_most_half_the_ttl() -> None:
    """An explicit heartbeat above ttl_ms // 2 is refused; exactly half is accepted."""
    assert check_heartbeat_ms(500, 1_000) == 500
    with pytest.raises(ValidationError, match=r"at most half of ttl_ms \(500\); got 501"):
        check_heartbeat_ms(501, 1_000)
    with pytest.raises(ValidationError, match="heartbeat_ms"):
        check_heartbeat_ms(True, 1_000)


@pytest.mark.parametrize("key", ["{", "}", "a\nb", "{x}:fence", "é", " "])
def test_keys_may_hold_any_character(key: str) -> None:
    """Braces, newlines and non-ASCII are valid key characters."""
    assert check_key(key) == key


@pytest.mark.parametrize("key", ["", None, b"k", 5])
def test_keys_must_be_non_empty_strings(key: object) -> None:
    """An empty or non-str key is refused."""
    with pytest.raises(ValidationError, match="key"):
        check_key(key)


class _NoBackend:
    """A backend that fails the test if validation lets a call through."""

    def _reached(self, *args: object) -> NoReturn:
        raise AssertionError(f"backend reached despite invalid input: {args!r}")

    acquire = renew = renew_many = release = inspect = force_release = _reached

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ttl_ms": 0},
        {"ttl_ms": -5},
        {"ttl_ms": 0.5},
        {"ttl_ms": True},
        {"ttl_ms": math.nan},
        {"ttl_ms": 2**31},
        {"wait_ms": -1},
        {"retry_delay_ms": 0},
        {"wait_ms": math.inf},
    ],
)
def test_manager_validates_before_any_io(kwargs: dict[str, object]) -> None:
    """acquire, hold and with_lease raise ValidationError before touching the store."""
    manager = LeaseManager(_NoBackend())
    with pytest.raises(ValidationError):
        manager.acquire("k", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValidationError), manager.hold("k", **kwargs):  # type: ignore[arg-type]
        pytest.fail("body ran")
    with pytest.raises(ValidationError):
        manager.with_lease("k", lambda lease: pytest.fail("fn ran"), **kwargs)  # type: ignore[arg-type]


def test_hold_refuses_a_heartbeat_above_half_the_ttl_before_acquiring() -> None:
    """The heartbeat bound is checked before the lease is taken."""
    manager = LeaseManager(_NoBackend())
    with (
        pytest.raises(ValidationError, match="heartbeat_ms"),
        manager.hold("k", ttl_ms=1_000, heartbeat_ms=2_000),
    ):
        pytest.fail("body ran")


def test_restore_validates() -> None:
    """restore refuses a naive expires_at, a bad token and an empty owner token."""
    from datetime import datetime

    manager = LeaseManager(_NoBackend())
    with pytest.raises(ValidationError, match="expires_at"):
        manager.restore("k", "owner", ttl_ms=1_000, expires_at=datetime(2026, 1, 1))
    with pytest.raises(ValidationError, match="fencing_token"):
        manager.restore("k", "owner", ttl_ms=1_000, fencing_token=0)
    with pytest.raises(ValidationError, match="owner_token"):
        manager.restore("k", "", ttl_ms=1_000)
