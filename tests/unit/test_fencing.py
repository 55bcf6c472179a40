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
    check_against_model,
    largest,
    lease,
)

import fencedlease
import fencedlease.aio
from fencedlease import LeaseKeyMismatchError, StaleTokenError, ValidationError
from fencedlease._core.fenced_resource import FencedResource
from fencedlease._core.fencing import MAX_FENCING_TOKEN, FencingAccess
from fencedlease._core.fencing_access import coerce_access, owner_fingerprint

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
    """Before the first access last_token is None, and token 1, the smallest, is accepted."""
    orders = FencedResource("orders")
    assert (orders.last_token, orders.lease_key) == (None, None)
    assert orders.accept(1) == 1
    assert orders.last_token == 1


# --- tokens are exact integers up to 2**63 - 1 ----------------------------------------------------


def test_tokens_past_2_53_are_told_apart() -> None:
    """2**53 + 1 accepted, then 2**53 (the same double) refused; 2**53 + 2 accepted after."""
    res = FencedResource("r")
    assert res.accept(lease(2**53 + 1)) == 9_007_199_254_740_993
    with pytest.raises(StaleTokenError) as info:
        res.accept(lease(2**53))
    assert (info.value.token, info.value.last_token) == (2**53, 2**53 + 1)
    assert res.accept(2**53 + 2) == 2**53 + 2
    strict = FencedResource("s", strict=True)
    strict.accept(2**53)
    assert strict.accept(2**53 + 1) == 2**53 + 1
    with pytest.raises(StaleTokenError, match="fences strictly"):
        strict.accept(2**53 + 1)


def test_largest_token_is_accepted_and_then_only_itself() -> None:
    """2**63 - 1 is accepted exactly; 2**63 - 2 after it is refused."""
    res = FencedResource("r")
    assert res.accept(lease(MAX_FENCING_TOKEN)) == 9_223_372_036_854_775_807
    with pytest.raises(StaleTokenError) as info:
        res.accept(MAX_FENCING_TOKEN - 1)
    assert info.value.last_token == MAX_FENCING_TOKEN
    assert res.accept(lease(MAX_FENCING_TOKEN)) == MAX_FENCING_TOKEN


@pytest.mark.parametrize(
    "bad",
    [0, -1, -(2**63), 2**63, 2**64, lease(0), lease(2**63), lease(-5)],
    ids=["0", "-1", "-2**63", "2**63", "2**64", "lease-0", "lease-2**63", "lease-negative"],
)
def test_token_out_of_range_names_argument_and_bound(bad: Any) -> None:
    """A token <= 0 or > 2**63 - 1 (bare or a lease's): ValidationError naming token_or_lease and
    both bounds; nothing recorded."""
    res = FencedResource("r")
    with pytest.raises(ValidationError) as info:
        res.accept(bad)
    assert info.value.argument == "token_or_lease"
    assert "1 <= token <= 9223372036854775807" in str(info.value)
    assert (res.last_token, res.lease_key) == (None, None)


def test_int_subclass_token_becomes_a_plain_int() -> None:
    """An IntEnum member is accepted as its value, and stored as a plain int."""
    import enum

    class Token(enum.IntEnum):
        FIRST = 2**53 + 1

    assert type(coerce_access(Token.FIRST).token) is int
    assert coerce_access(Token.FIRST).token == 2**53 + 1


# --- one lease key per resource -------------------------------------------------------------------


def test_lease_of_another_key_is_refused_naming_both_keys() -> None:
    """A resource fenced by leases on order:42 refuses a lease on order:43 whatever its token, with
    LeaseKeyMismatchError (a StaleTokenError) naming both keys and no owner token; nothing moves."""
    res = FencedResource("order-42-row")
    res.accept(lease(34, key="order:42"))
    assert res.lease_key == "order:42"
    for token in (1, 34, 35, MAX_FENCING_TOKEN):
        with pytest.raises(LeaseKeyMismatchError) as info:
            res.accept(lease(token, owner=1, key="order:43"))
        exc = info.value
        assert isinstance(exc, StaleTokenError)
        assert (exc.resource, exc.token, exc.last_token) == ("order-42-row", token, 34)
        assert (exc.lease_key, exc.presented_key) == ("order:42", "order:43")
        assert "'order:43'" in str(exc)
        assert "'order:42'" in str(exc)
        assert "counted per counter (per prefix and key)" in str(exc)
        assert "duplicate" not in str(exc)
        assert OWNERS[0] not in str(exc) + repr(exc)
        assert OWNERS[1] not in str(exc) + repr(exc)
    assert (res.last_token, res.last_fingerprint, res.lease_key) == (
        34,
        owner_fingerprint(OWNERS[0]),
        "order:42",
    )
    # The resource's own key goes on working; a bare int is allowed (it has no key).
    assert res.accept(lease(35, key="order:42")) == 35
    assert res.accept(36) == 36
    assert res.lease_key == "order:42"


def test_cron_job_of_a_new_user_is_told_the_key_not_a_duplicate_grant() -> None:
    """Two users' cron jobs each get token 1 from their own key's counter: the second is refused
    for its key, not as "a duplicate grant" (the counter was not rolled back)."""
    report = FencedResource("daily-report")
    report.accept(lease(1, owner=0, key="cron:alice"))
    with pytest.raises(LeaseKeyMismatchError, match="'cron:bob'") as info:
        report.accept(lease(1, owner=1, key="cron:bob"))
    assert "rolled back" not in str(info.value)


def test_bare_ints_first_then_the_first_lease_records_its_key() -> None:
    """Bare ints record no key; the first lease does, and keeps it."""
    res = FencedResource("r")
    res.accept(5)
    assert res.lease_key is None
    res.accept(lease(6, key="order:42"))
    res.accept(lease(7, key="order:42"))
    assert res.lease_key == "order:42"
    with pytest.raises(LeaseKeyMismatchError):
        res.accept(lease(8, key="orders"))


def test_key_mismatch_error_survives_pickling() -> None:
    """LeaseKeyMismatchError crosses process boundaries with every attribute."""
    res = FencedResource("r")
    res.accept(lease(3, key="order:42"))
    with pytest.raises(LeaseKeyMismatchError) as info:
        res.accept(lease(4, key="orders"))
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is LeaseKeyMismatchError
    assert (copy.resource, copy.token, copy.last_token, copy.lease_key, copy.presented_key) == (
        "r",
        4,
        3,
        "order:42",
        "orders",
    )
    assert str(copy) == str(info.value)
    assert fencedlease.LeaseKeyMismatchError is LeaseKeyMismatchError
    assert "LeaseKeyMismatchError" in fencedlease.__all__
    assert fencedlease.aio.LeaseKeyMismatchError is LeaseKeyMismatchError


@pytest.mark.parametrize(
    "bad_key", ["", 42, b"order:42", "\ud800"], ids=["empty", "int", "bytes", "surrogate"]
)
def test_lease_with_a_bad_key_is_a_validation_error(bad_key: Any) -> None:
    """A lease whose key is not a non-empty UTF-8 str is refused before anything is recorded."""
    res = FencedResource("r")
    with pytest.raises(ValidationError) as info:
        res.accept(FakeLease(bad_key, OWNERS[0], 3))
    assert info.value.argument == "token_or_lease"
    assert res.last_token is None


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [True, False, 3.0, None, "34", 0, -1, MAX_FENCING_TOKEN + 1, object(), lease(None)],
    ids=[
        "True",
        "False",
        "float",
        "None",
        "str",
        "zero",
        "negative",
        "too-big",
        "object",
        "no-token",
    ],
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
    """2**63 - 1 is the largest token (a signed 64-bit counter's largest value)."""
    assert coerce_access(MAX_FENCING_TOKEN) == FencingAccess(9_223_372_036_854_775_807, None)
    assert coerce_access(lease(MAX_FENCING_TOKEN)) == FencingAccess(
        MAX_FENCING_TOKEN, owner_fingerprint(OWNERS[0]), "orders"
    )


def test_resource_name_must_be_a_non_empty_str() -> None:
    """FencedResource("") and FencedResource(3) are ValidationErrors naming "name"."""
    for bad in ("", 3):
        with pytest.raises(ValidationError) as info:
            FencedResource(bad)  # type: ignore[arg-type]
        assert info.value.argument == "name"


@pytest.mark.parametrize("bad", ["no", 1, None, 0.0])
def test_strict_must_be_a_bool(bad: Any) -> None:
    """strict="no" would be true: anything but a bool is a ValidationError naming "strict"."""
    with pytest.raises(ValidationError) as info:
        FencedResource("r", strict=bad)
    assert info.value.argument == "strict"


# --- fingerprints and secrecy ---------------------------------------------------------------------


def test_owner_fingerprint_is_16_hex_of_sha256() -> None:
    """The fingerprint is the first 16 hex characters of SHA-256 of the owner token."""
    assert owner_fingerprint("abc") == "ba7816bf8f01cfea"
    assert owner_fingerprint(OWNERS[0]) == hashlib.sha256(OWNERS[0].encode()).hexdigest()[:16]
    for bad in ("", "\ud800", None):
        with pytest.raises(ValidationError) as info:
            owner_fingerprint(bad)  # type: ignore[arg-type]
        assert info.value.argument == "owner_token"
    with pytest.raises(ValidationError) as info:
        coerce_access(FakeLease("k", "\ud800", 3))
    assert info.value.argument == "token_or_lease"


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


def test_an_accept_decides_and_records_in_one_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale holder (token 1) is held inside its decision until the newer holder's accept
    (token 2) has returned, or for at most one second: while one accept decides, another waits
    for it, so the newer accept cannot return first and the wait runs out; both are accepted in
    turn and the fence ends at 2. A FencedResource that decided outside its lock would let the
    newer accept through meanwhile, and the stale one would then record 1 over it (the fence
    going back). The bound only ends a wait for what must not happen."""
    from fencedlease._core.fencing import decide as real_decide

    stale_deciding, newer_done = threading.Event(), threading.Event()

    def held_decide(state: Any, access: Any, *, strict: bool) -> Any:
        outcome = real_decide(state, access, strict=strict)
        if access.token == 1:
            stale_deciding.set()
            newer_done.wait(timeout=1.0)
        return outcome

    monkeypatch.setattr("fencedlease._core.fenced_resource.decide", held_decide)
    orders = FencedResource("orders")
    results: dict[int, object] = {}

    def present(token: int) -> None:
        try:
            results[token] = orders.accept(token)
        except StaleTokenError as exc:
            results[token] = exc.last_token
        if token == 2:
            newer_done.set()

    stale = threading.Thread(target=present, args=(1,))
    stale.start()
    assert stale_deciding.wait(timeout=30.0)
    newer = threading.Thread(target=present, args=(2,))
    newer.start()
    stale.join()
    newer.join()
    assert results == {1: 1, 2: 2}
    assert orders.last_token == 2


# --- against the sequential model (test_fencing_model.py) ---------------------------------------


@settings(max_examples=300, deadline=None)
@given(accesses=accesses, strict=st.booleans())
def test_fenced_resource_accepts_what_the_model_accepts(
    accesses: list[Access], strict: bool
) -> None:
    """For any sequence of accesses, FencedResource (strict or not for the whole sequence)
    accepts exactly what the model accepts, and refuses for the reason it gives."""
    res = FencedResource("orders", strict=strict)
    history = check_against_model(
        lambda token_or_lease, _: res.accept(token_or_lease),
        [(token, who, strict, key) for token, who, _, key in accesses],
    )
    assert res.last_token == largest(history)
