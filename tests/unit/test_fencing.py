"""FencedResource, the token-or-lease coercion and the fencing rule (no server)."""

from __future__ import annotations

import hashlib
import pickle
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fencing_model import (
    OWNERS,
    Access,
    FakeLease,
    accesses,
    attempt,
    lease,
    model_accepts,
    present,
)

from fencedlease import StaleTokenError, ValidationError
from fencedlease._fencing import (
    MAX_FENCING_TOKEN,
    FencedResource,
    FencingAccess,
    coerce_access,
    owner_fingerprint,
)

# --- the fencing cases -------------------------------------------------------------------------


def test_older_token_is_refused_with_last_token() -> None:
    """34 accepted, then 33 is refused with last_token == 34."""
    orders = FencedResource("orders")
    assert orders.accept(34) == 34
    with pytest.raises(StaleTokenError) as info:
        orders.accept(33)
    assert (info.value.resource, info.value.token, info.value.last_token) == ("orders", 33, 34)
    assert orders.last_token == 34


def test_same_lease_twice_is_accepted() -> None:
    """The same lease presenting 34 twice is accepted both times."""
    orders = FencedResource("orders")
    assert orders.accept(lease(34)) == 34
    assert orders.accept(lease(34)) == 34
    assert orders.last_token == 34


def test_same_lease_twice_is_refused_when_strict() -> None:
    """Under strict fencing the second access with 34 is refused."""
    orders = FencedResource("orders", strict=True)
    orders.accept(lease(34))
    with pytest.raises(StaleTokenError) as info:
        orders.accept(lease(34))
    assert info.value.last_token == 34
    assert "fences strictly" in str(info.value)


def test_two_leases_with_the_same_token_second_is_refused() -> None:
    """A duplicate grant (two leases, one number) is refused for the second lease."""
    orders = FencedResource("orders")
    orders.accept(lease(34, owner=0))
    with pytest.raises(StaleTokenError) as info:
        orders.accept(lease(34, owner=1))
    assert (info.value.token, info.value.last_token) == (34, 34)
    assert "different lease" in str(info.value)
    assert orders.last_fingerprint == owner_fingerprint(OWNERS[0])
    # The first lease keeps working, and a larger token from anyone is accepted.
    assert orders.accept(lease(34, owner=0)) == 34
    assert orders.accept(lease(35, owner=1)) == 35


def test_bare_int_is_an_unknown_lease() -> None:
    """An int has no fingerprint: the same number is accepted after a lease, and vice versa."""
    orders = FencedResource("orders")
    orders.accept(lease(34, owner=0))
    assert orders.accept(34) == 34
    with pytest.raises(StaleTokenError):
        orders.accept(lease(34, owner=1))

    other = FencedResource("other")
    other.accept(34)
    assert other.last_fingerprint is None
    other.accept(lease(34, owner=1))  # the first known lease for 34 is recorded
    assert other.last_fingerprint == owner_fingerprint(OWNERS[1])
    with pytest.raises(StaleTokenError):
        other.accept(lease(34, owner=2))


def test_larger_token_replaces_the_fingerprint() -> None:
    """A larger token is accepted from any lease, and its fingerprint (or None) is recorded."""
    orders = FencedResource("orders")
    orders.accept(lease(1, owner=0))
    orders.accept(2)
    assert (orders.last_token, orders.last_fingerprint) == (2, None)


def test_fresh_resource_has_no_last_token() -> None:
    """Before the first access last_token is None, and token 0 is accepted."""
    orders = FencedResource("orders")
    assert orders.last_token is None
    assert orders.accept(0) == 0
    assert orders.last_token == 0


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [True, False, 3.0, None, "34", -1, MAX_FENCING_TOKEN + 1, object(), lease(None)],
    ids=["True", "False", "float", "None", "str", "negative", "too-big", "object", "no-token"],
)
def test_not_a_token_or_lease_is_a_validation_error(bad: Any) -> None:
    """Anything but an int in range or a lease with a token is refused before any state change."""
    orders = FencedResource("orders")
    with pytest.raises(ValidationError) as info:
        orders.accept(bad)
    assert info.value.argument == "token_or_lease"
    assert isinstance(info.value, ValueError)
    assert orders.last_token is None


def test_lease_with_bool_token_or_empty_owner_is_refused() -> None:
    """A lease's fencing_token must be an int (not bool), its owner_token a non-empty str."""
    with pytest.raises(ValidationError, match="must be an int"):
        coerce_access(FakeLease("k", "x" * 32, True))
    with pytest.raises(ValidationError, match="owner_token"):
        coerce_access(FakeLease("k", "", 3))


def test_max_token_is_accepted() -> None:
    """2**53 - 1 is the largest token (Lua numbers are doubles)."""
    assert coerce_access(MAX_FENCING_TOKEN) == FencingAccess(9_007_199_254_740_991, None)


def test_resource_name_must_be_a_non_empty_str() -> None:
    """FencedResource("") and FencedResource(3) are ValidationErrors naming "name"."""
    for bad in ("", 3):
        with pytest.raises(ValidationError) as info:
            FencedResource(bad)  # type: ignore[arg-type]
        assert info.value.argument == "name"


# --- fingerprints and secrecy ---------------------------------------------------------------------


def test_owner_fingerprint_is_16_hex_of_sha256() -> None:
    """The fingerprint is the first 16 hex characters of SHA-256 of the owner token."""
    assert owner_fingerprint("abc") == "ba7816bf8f01cfea"
    assert owner_fingerprint(OWNERS[0]) == hashlib.sha256(OWNERS[0].encode()).hexdigest()[:16]
    with pytest.raises(ValidationError):
        owner_fingerprint("")


def test_owner_token_never_appears_in_repr_or_errors() -> None:
    """Neither the resource's repr nor a refusal reveals the secret owner token."""
    orders = FencedResource("orders")
    orders.accept(lease(34, owner=0))
    with pytest.raises(StaleTokenError) as info:
        orders.accept(lease(34, owner=1))
    text = repr(orders) + str(info.value) + repr(info.value) + repr(coerce_access(lease(3)))
    assert OWNERS[0] not in text
    assert OWNERS[1] not in text
    assert repr(orders) == "FencedResource('orders', strict=False, last_token=34)"


def test_stale_token_error_survives_pickling() -> None:
    """A refusal crosses process boundaries with its attributes and message intact."""
    orders = FencedResource("orders")
    orders.accept(34)
    with pytest.raises(StaleTokenError) as info:
        orders.accept(33)
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.resource, copy.token, copy.last_token, str(copy)) == (
        "orders",
        33,
        34,
        str(info.value),
    )


# --- concurrency ----------------------------------------------------------------------------------


def test_concurrent_accepts_keep_the_largest_and_refuse_only_stale() -> None:
    """Eight threads released by one barrier: last_token ends at the maximum, and every refusal
    names a larger token that was really accepted."""
    orders = FencedResource("orders")
    threads = 8
    per_thread = 250
    barrier = threading.Barrier(threads)
    accepted: list[list[int]] = [[] for _ in range(threads)]
    refused: list[list[tuple[int, int | None]]] = [[] for _ in range(threads)]

    def work(i: int) -> None:
        barrier.wait()
        for n in range(per_thread):
            token = n * threads + i + 1  # interleaved, all distinct
            try:
                orders.accept(token)
                accepted[i].append(token)
            except StaleTokenError as exc:
                refused[i].append((token, exc.last_token))

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    everything = {t for row in accepted for t in row}
    assert orders.last_token == threads * per_thread
    assert threads * per_thread in everything
    assert sum(map(len, accepted)) + sum(map(len, refused)) == threads * per_thread
    for row in refused:
        for token, last in row:
            assert last is not None
            assert last > token
            assert last in everything


# --- against the sequential model (test_fencing_model.py) ---------------------------------------


@settings(max_examples=300, deadline=None)
@given(accesses=accesses, strict=st.booleans())
def test_fenced_resource_accepts_what_the_model_accepts(
    accesses: list[Access], strict: bool
) -> None:
    """For any sequence of accesses, FencedResource accepts exactly what the model accepts."""
    orders = FencedResource("orders", strict=strict)
    history: list[tuple[int, int | None]] = []
    for token, who, _ in accesses:
        expected = model_accepts(history, token, who, strict)
        got, last = attempt(orders.accept, present(who, token))
        assert got == expected, (history, token, who)
        if not got:
            assert last == max(t for t, _ in history)
        if got:
            history.append((token, who))
        assert orders.last_token == (max(t for t, _ in history) if history else None)
