"""The sync and async faces cannot drift: same public names, same parameters (names, kinds,
defaults, annotations up to the Async prefix and Awaitable), I/O awaited exactly where the sync
face blocks, and results with the same fields."""

from __future__ import annotations

import inspect
import re
from typing import Any

import attrs
import pytest

from fencedlease import AcquireResult, Lease, LeaseManager, LeaseOutcome
from fencedlease.aio import AsyncAcquireResult, AsyncLease, AsyncLeaseManager, AsyncLeaseOutcome

PAIRS = [(LeaseManager, AsyncLeaseManager), (Lease, AsyncLease)]

# Dunders that differ on purpose: with/async with.
TWIN_DUNDERS = {"__enter__": "__aenter__", "__exit__": "__aexit__"}

# Methods that do I/O: a coroutine function on the async face, a plain one on the sync face.
IO_METHODS = {
    LeaseManager: {"acquire", "with_lease", "inspect", "force_release", "close"},
    Lease: {"renew", "release", "wait_lost"},
}

# Return annotations that are rightly different in kind, not just by name.
RETURN_TWINS = {
    ("hold", "Iterator[Lease]"): "AbstractAsyncContextManager[AsyncLease]",
    ("renewer", "Renewer"): "AsyncRenewer",
}


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def _normalise(annotation: str) -> str:
    """Erase what only names the face: ``Async`` prefixes, ``redis.asyncio.`` and Awaitable."""
    text = annotation.replace("redis.asyncio.Redis", "redis.Redis")
    text = re.sub(r"\bAsync(?=[A-Z])", "", text)
    while True:
        new = re.sub(r"Awaitable\[([^\[\]]*(?:\[[^\[\]]*\])?[^\[\]]*)\]", r"\1", text)
        if new == text:
            return text
        text = new


def _attr(cls: type, name: str) -> Any:
    return inspect.getattr_static(cls, name)


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=lambda c: c.__name__)
def test_same_public_names(sync: type, aio: type) -> None:
    """Every public name of one face exists on the other."""
    assert _public(sync) == _public(aio)
    for sync_name, aio_name in TWIN_DUNDERS.items():
        assert hasattr(sync, sync_name) == hasattr(aio, aio_name)


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=lambda c: c.__name__)
def test_same_kinds_of_member(sync: type, aio: type) -> None:
    """A property stays a property, a classmethod a classmethod, a method a method."""
    for name in _public(sync):
        assert type(_attr(sync, name)) is type(_attr(aio, name)), name


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=lambda c: c.__name__)
def test_same_signatures(sync: type, aio: type) -> None:
    """Parameters match by name, kind, default and (normalised) annotation; so do return
    annotations, apart from the listed twins (a context manager, the renewer)."""
    names = sorted(_public(sync) | {"__init__"})
    for name in names:
        sync_member, aio_member = getattr(sync, name), getattr(aio, name)
        if isinstance(_attr(sync, name), property):
            sync_member, aio_member = _attr(sync, name).fget, _attr(aio, name).fget
        if not callable(sync_member):
            continue
        s_sig, a_sig = inspect.signature(sync_member), inspect.signature(aio_member)
        s_params = [
            (p.name, p.kind, p.default, _normalise(str(p.annotation)))
            for p in s_sig.parameters.values()
        ]
        a_params = [
            (p.name, p.kind, p.default, _normalise(str(p.annotation)))
            for p in a_sig.parameters.values()
        ]
        assert s_params == a_params, name
        s_ret, a_ret = str(s_sig.return_annotation), str(a_sig.return_annotation)
        expected = RETURN_TWINS.get((name, s_ret))
        if expected is not None:
            assert a_ret == expected, name
        else:
            assert _normalise(s_ret) == _normalise(a_ret), name


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=lambda c: c.__name__)
def test_io_is_awaited_exactly_where_sync_blocks(sync: type, aio: type) -> None:
    """The I/O methods are coroutine functions on the async face and plain on the sync face;
    every other method is plain on both (restore, check, hold: no I/O at call time)."""
    io = IO_METHODS[sync]
    for name in sorted(_public(sync)):
        member = _attr(aio, name)
        if isinstance(member, (property, classmethod, staticmethod)):
            continue
        assert inspect.iscoroutinefunction(getattr(aio, name)) is (name in io), name
        assert not inspect.iscoroutinefunction(getattr(sync, name)), name
    assert inspect.iscoroutinefunction(aio.__aenter__ if hasattr(aio, "__aenter__") else _none)


async def _none() -> None:
    return None


@pytest.mark.parametrize(
    ("sync", "aio"),
    [(AcquireResult, AsyncAcquireResult), (LeaseOutcome, AsyncLeaseOutcome)],
    ids=lambda c: c.__name__,
)
def test_results_have_the_same_fields(sync: type, aio: type) -> None:
    """Result objects: same attrs fields (name, default), same public properties."""
    s_fields = [(f.name, f.default) for f in attrs.fields(sync)]
    a_fields = [(f.name, f.default) for f in attrs.fields(aio)]
    assert s_fields == a_fields
    assert _public(sync) == _public(aio)


def test_defaults_are_one_definition() -> None:
    """The async face's defaults are the sync module's constant objects, not copies."""
    from fencedlease import _manager

    for method in ("acquire", "hold", "with_lease"):
        params = inspect.signature(getattr(AsyncLeaseManager, method)).parameters
        assert params["ttl_ms"].default is _manager.DEFAULT_TTL_MS
        assert params["retry_delay_ms"].default is _manager.DEFAULT_RETRY_DELAY_MS
    assert (_manager.DEFAULT_TTL_MS, _manager.DEFAULT_RETRY_DELAY_MS) == (30_000, 100)
