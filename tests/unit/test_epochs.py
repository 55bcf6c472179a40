"""The epoch tokens and the majority's decision of a replicated Redis (`fencedlease._core.epochs`);
no server needed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fencedlease import ValidationError
from fencedlease._core.epochs import (
    MAX_EPOCH,
    Majority,
    Named,
    compose,
    epoch_of,
    floor,
    majority_of,
)

A, B, C = ("10.0.0.1", 6379), ("10.0.0.2", 6379), ("10.0.0.3", 6379)


def test_a_token_puts_the_epoch_above_forty_bits_of_counter() -> None:
    """A token is ``epoch * 2**40 + counter``; epoch 0 keeps the plain counter."""
    assert compose(0, 7) == 7
    assert compose(1, 0) == floor(1) == 1_099_511_627_776
    assert compose(3, 5) == 3 * 2**40 + 5
    assert compose(MAX_EPOCH, 2**40 - 1) == 2**63 - 1
    assert epoch_of(compose(42, 2**40 - 1)) == 42


@pytest.mark.parametrize(
    ("epoch", "counter", "argument", "bound"),
    [
        (-1, 0, "epoch", "0 <= epoch <= 8388607"),
        (MAX_EPOCH + 1, 0, "epoch", "0 <= epoch <= 8388607"),
        (True, 0, "epoch", "0 <= epoch <= 8388607"),
        (1, 2**40, "counter", "0 <= counter <= 1099511627775"),
        (1, -1, "counter", "0 <= counter <= 1099511627775"),
        (1, 1.0, "counter", "0 <= counter <= 1099511627775"),
    ],
)
def test_an_epoch_or_counter_out_of_bounds_is_refused(
    epoch: object, counter: object, argument: str, bound: str
) -> None:
    """An epoch outside 0..2**23-1 or a counter outside 0..2**40-1 is refused, named."""
    with pytest.raises(ValidationError, match=bound) as caught:
        compose(epoch, counter)  # type: ignore[arg-type]
    assert caught.value.argument == argument


@given(
    st.tuples(st.integers(0, MAX_EPOCH), st.integers(0, 2**40 - 1)),
    st.tuples(st.integers(0, MAX_EPOCH), st.integers(0, 2**40 - 1)),
)
def test_tokens_order_as_their_epoch_then_counter(
    one: tuple[int, int], other: tuple[int, int]
) -> None:
    """Tokens compare as (epoch, counter) pairs do, and stay below 2**63."""
    assert (compose(*one) < compose(*other)) == (one < other)
    assert compose(*one) < 2**63


@given(st.integers(0, MAX_EPOCH - 1), st.integers(0, 2**40 - 1), st.integers(0, 2**40 - 1))
def test_the_first_grant_of_a_newer_epoch_beats_any_counter_of_an_older(
    epoch: int, old: int, rolled_back: int
) -> None:
    """``max(counter + 1, floor(newer))`` exceeds every token of an older epoch."""
    granted = max(min(rolled_back, compose(epoch, old)) + 1, floor(epoch + 1))
    assert granted > compose(epoch, old)


def test_a_majority_of_configured_voters() -> None:
    """A majority of n voters is n // 2 + 1; fewer than one voter is refused."""
    assert [majority_of(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
    with pytest.raises(ValidationError, match="configured must be an int >= 1"):
        majority_of(0)


def test_a_majority_names_the_primary_and_its_epoch() -> None:
    """Two of three naming one address at one epoch name it."""
    decided = Majority.decide(3, [(A, 5), (A, 5), None])
    assert decided == Majority(Named(A, 5), None)
    assert decided.confirms(A, 5) is None


def test_a_majority_split_on_the_epoch_names_nothing() -> None:
    """Two naming one address at two epochs (a voter that has not learnt the newer one) are no
    majority: a later majority could lack the newer epoch."""
    decided = Majority.decide(3, [(A, 4), (A, 5), None])
    assert decided.named is None
    assert decided.why == (
        "no majority: 1 of 3 configured voters agree on the primary and its epoch, 2 needed"
    )


def test_a_minority_confirms_nothing() -> None:
    """One sentinel of three (the others silent) names nothing, whatever it says."""
    decided = Majority.decide(3, [(A, 9), None, None])
    assert decided.named is None
    assert (
        decided.why
        == "no majority: 1 of 3 configured voters agree on the primary and its epoch, 2 needed"
    )
    assert decided.confirms(A, 9) == decided.why


def test_silent_voters_count_against() -> None:
    """Two agreeing of five configured (three silent) are no majority."""
    decided = Majority.decide(5, [(A, 1), (A, 1)])
    assert (
        decided.why
        == "no majority: 2 of 5 configured voters agree on the primary and its epoch, 3 needed"
    )


def test_a_voter_with_a_newer_epoch_elsewhere_vetoes() -> None:
    """A failover's leader naming another primary with a newer epoch leaves nothing named."""
    decided = Majority.decide(3, [(A, 4), (A, 4), (B, 5)])
    assert decided.named is None
    assert decided.why == f"a voter names {B!r} with an epoch newer than 4: a failover"


def test_a_grant_counts_only_on_the_named_node_at_its_epoch() -> None:
    """A grant on another node, or with the floor of another epoch, is not confirmed."""
    decided = Majority.decide(3, [(A, 4), (A, 4), (C, 3)])
    assert decided.named == Named(A, 4)
    assert decided.confirms(B, 4) == f"the majority names {A!r} the primary, not {B!r}"
    assert decided.confirms(A, 3) == "the primary's epoch moved from 3 to 4 meanwhile"


def test_a_mixed_majority_cannot_name_an_older_primary_later() -> None:
    """A grant confirmed on A at epoch 2 cannot be followed by one confirmed on B at epoch 1:
    the later majority shares a voter with the earlier, which reports epoch 2 or newer."""
    before = Majority.decide(3, [(A, 2), (A, 2), None])
    after = Majority.decide(3, [None, (B, 1), (B, 1)])  # impossible: voter 1 went back
    assert before.named == Named(A, 2)
    assert after.named == Named(B, 1)
    later = Majority.decide(3, [None, (A, 2), (B, 1)])  # what voter 1 can say later
    assert later.named is None


def test_more_replies_than_voters_is_refused() -> None:
    """Four replies from three configured voters is a ValidationError naming the replies."""
    with pytest.raises(ValidationError, match="4 replies from 3 configured voters"):
        Majority.decide(3, [(A, 1)] * 4)


# A history of failovers: epoch i names configs[i]. Each voter has reached some epoch, never
# going back; a decision later in time sees each voter at an epoch no lower.
configs = st.lists(st.sampled_from([A, B, C]), min_size=1, max_size=6)


@given(configs, st.data())
def test_two_decisions_never_name_two_primaries_for_one_epoch(
    history: list[tuple[str, int]], data: st.DataObject
) -> None:
    """Decisions taken one after the other (each voter's epoch never decreasing, some silent) name
    a newer or equal epoch, and a different primary only with a strictly newer epoch."""
    voters = data.draw(st.integers(1, 5))
    last = len(history) - 1
    first = data.draw(st.lists(st.integers(0, last), min_size=voters, max_size=voters))
    second = [data.draw(st.integers(at, last)) for at in first]
    silent1 = data.draw(st.lists(st.booleans(), min_size=voters, max_size=voters))
    silent2 = data.draw(st.lists(st.booleans(), min_size=voters, max_size=voters))

    def replies(at: list[int], silent: list[bool]) -> list[tuple[tuple[str, int], int] | None]:
        return [None if s else (history[e], e) for e, s in zip(at, silent, strict=True)]

    before = Majority.decide(voters, replies(first, silent1)).named
    after = Majority.decide(voters, replies(second, silent2)).named
    if before is not None and after is not None:
        assert after.epoch >= before.epoch
        if after.address != before.address:
            assert after.epoch > before.epoch
