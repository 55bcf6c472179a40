"""A renewal batch packed by the library: the same bytes redis-py would send, each lease's part
built once and kept on its item; the ``'joined'`` reply decoded entry by entry; a batch's
deadline computed once per TTL."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from fencedlease import BackendError
from fencedlease._core.schedule import RenewalEntry, RenewalItem, RenewalSchedule, renewal_items
from fencedlease._core.state import LeaseState
from fencedlease._redis.replies import decode_renew_many
from fencedlease._redis.scripts import RENEW_MANY
from fencedlease._redis.wire import PackedRenewals

ITEMS = [("a", "o1", 1000), ("naïve {x}%", "o2", 2_147_483_647), ("", "o3", 1)]


def redis_py_packing(client: redis.Redis, items: list[tuple[str, str, int]]) -> bytes:
    """What redis-py sends for ``renew_many.lua`` over ``items``, asked for ``'joined'``."""
    from fencedlease._redis.keys import renew_many_args

    keys, args = renew_many_args("pre", items)
    connection: Any = client.connection_pool.make_connection()  # redis-py: no annotations
    packed = connection.pack_command("EVALSHA", RENEW_MANY.sha, len(keys), *keys, *args, "joined")
    return b"".join(packed)


@pytest.mark.parametrize(
    "client",
    [
        redis.Redis(),
        redis.Redis(decode_responses=True),
        redis.Redis(encoding="latin-1"),
    ],
    ids=["bytes", "str", "latin-1"],
)
def test_a_packed_batch_is_redis_pys_command(client: redis.Redis) -> None:
    packer = PackedRenewals(RENEW_MANY, "pre", client.get_encoder().encode)
    assert packer.command(ITEMS) == redis_py_packing(client, ITEMS)
    items = [RenewalItem(item) for item in ITEMS]
    assert packer.command(items) == redis_py_packing(client, ITEMS)  # built, then kept
    assert packer.command(items) == redis_py_packing(client, ITEMS)  # kept, used again


def test_a_leases_part_is_built_once_per_packer() -> None:
    encode = redis.Redis().get_encoder().encode
    packer, other = (PackedRenewals(RENEW_MANY, prefix, encode) for prefix in ("pre", "other"))
    item = RenewalItem(("a", "o1", 1000))
    assert item.wire is None
    packer.command([item])
    wire = item.wire
    assert wire == (packer, b"$7\r\npre:{a}\r\n", b"$2\r\no1\r\n$4\r\n1000\r\n")
    packer.command([item])
    assert item.wire is wire  # not built again
    assert other.command([item]).count(b"other:{a}") == 1  # another packer's: its own part
    assert item.wire == (other, b"$9\r\nother:{a}\r\n", b"$2\r\no1\r\n$4\r\n1000\r\n")


def test_an_entry_keeps_its_item_until_its_ttl_changes() -> None:
    state = LeaseState("k", "owner", 3, 4000, 14.0, 1e9)
    entry = RenewalEntry(state, 1000, None)
    (first,) = renewal_items([entry])
    assert (first, type(first)) == (("k", "owner", 4000), RenewalItem)
    (again,) = renewal_items([entry])
    assert again is first
    state.ttl_ms = 9000  # a manual renew(ttl_ms=9000)
    (changed,) = renewal_items([entry])
    assert changed == ("k", "owner", 9000) and changed is not first
    assert entry.sent_ttl_ms == 9000


def test_a_joined_reply_of_tokens() -> None:
    items = [("a", "o", 1), ("b", "o", 1), ("c", "o", 1)]
    assert decode_renew_many(items, b"7 9223372036854775807 12") == [7, 2**63 - 1, 12]
    assert decode_renew_many(items, "7 8 12") == [7, 8, 12]  # decode_responses=True
    assert decode_renew_many([], b"") == []


def test_a_joined_reply_entry_by_entry() -> None:
    items = [(k, "o", 5) for k in "abcdefg"]
    results = decode_renew_many(items, b"5 0 -1 -2 -3 9223372036854775808 x")
    assert results[:2] == [5, 0]
    errors = results[2:]
    assert all(isinstance(e, BackendError) for e in errors)
    assert [str(e) for e in errors] == [
        "renew 'c': ttl_ms 5 refused by Redis",
        "renew 'd': WRONGTYPE, the lease key holds another type (or cannot be read)",
        "renew 'e': the lease key holds a malformed value",
        "renew 'f': 9223372036854775808 is outside 1..2**63-1",
        "renew 'g': not a fencing token (a decimal integer 1..2**63-1)",
    ]


@pytest.mark.parametrize("reply", [b"5 6", b"5 6 7 8", b"", b"5  6 7"])
def test_a_joined_reply_of_another_length_is_refused(reply: bytes) -> None:
    items = [("a", "o", 1), ("b", "o", 1), ("c", "o", 1)]
    with pytest.raises(BackendError, match=r"renew 3 leases: unexpected reply for 3 leases"):
        decode_renew_many(items, reply)


def test_a_batch_sets_each_leases_deadline_from_its_own_ttl() -> None:
    schedule = RenewalSchedule()
    made = []
    for i, ttl_ms in enumerate((4000, 6000, 4000)):
        state = LeaseState(f"k{i}", "o", 1, ttl_ms, 10.0 + ttl_ms / 1000, 1e9)
        entry = RenewalEntry(state, 1000, None)
        schedule.add(entry, 10.0)
        made.append(entry)
    batch = schedule.pop_batch(11.0, 10)
    assert len(batch) == 3
    renewal_items(batch)
    assert schedule.apply(batch, 11.1, 1e9, [7, 7, 7], 11.2) == []
    assert [e.state.deadline for e in made] == [15.1, 17.1, 15.1]
    assert [e.state.expires_wall for e in made] == [1e9 + 4.0, 1e9 + 6.0, 1e9 + 4.0]
    assert {e.next_due for e in made} == {12.1}
    assert schedule.pop_expired(15.1) == [made[0], made[2]]
    assert made[0].state.lost and not made[1].state.lost
    assert schedule.pop_expired(17.1) == [made[1]]
