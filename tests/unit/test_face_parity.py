"""The two faces offer one surface: every public class and function of ``fencedlease.aio`` (and of
``fencedlease.backends``' asyncio stores) against its sync twin, by public members, parameters
(name, kind, default, annotation up to the face's wrappers) and the errors each documents in its
``Raises:`` section. A difference is a failure unless it is listed below with its reason.

The behaviour of the known drift points, each run on both faces with the same outcome, is in
``test_face_drifts.py``; the scenario run on both faces is in ``test_faces.py``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

import fencedlease
import fencedlease.aio
import fencedlease.backends
from fencedlease._sync.renewer import Renewer
from fencedlease._sync.urls import backend_from_url


def _twin(name: str) -> Any:
    """The sync twin of the public asyncio name ``name``: ``X`` for ``AsyncX`` (or the same name)
    in ``fencedlease`` or ``fencedlease.backends``, else the private twin the sync face uses."""
    private: dict[str, Any] = {"AsyncRenewer": Renewer, "async_backend_from_url": backend_from_url}
    if name in private:
        return private[name]
    sync = re.sub(r"^(Async|async_)", "", name)
    for module in (fencedlease, fencedlease.backends):
        if sync in getattr(module, "__all__", ()):
            return getattr(module, sync)
    raise AssertionError(f"fencedlease.aio.{name} has no sync twin")


def _aio_names() -> list[str]:
    """The public names of the asyncio face that are its own (not the sync face's object
    re-exported: the error classes, ``LeaseInfo``, ``AsyncLeaseBackend``)."""
    aio = [
        n
        for n in fencedlease.aio.__all__
        if getattr(fencedlease, n, None) is not getattr(fencedlease.aio, n)
    ]
    backends = [n for n in fencedlease.backends.__all__ if n.startswith("Async")]
    return sorted(aio + backends + ["AsyncLeaseBackend"])


def _aio_object(name: str) -> Any:
    for module in (fencedlease.aio, fencedlease.backends):
        if name in getattr(module, "__all__", ()):
            return getattr(module, name)
    return getattr(fencedlease, name)  # AsyncLeaseBackend: both protocols live in fencedlease


AIO_NAMES = _aio_names()

# Sync public names with no asyncio twin, and why: each is used as it is from asyncio code (no I/O,
# or values), or it is a sync-only tool.
SYNC_ONLY = {
    "ACL_COMMANDS": "a value: the ACL a user needs, the same for both faces",
    "FencedResource": "no I/O: accept() is the same call from asyncio code",
    "HealthReport": "a result: check_health returns it on both faces",
    "LeaseEvent": "a value: the on_event hook receives it on both faces",
    "RedisFencedResource": "sync only: over a sync redis client (an asyncio client is refused)",
    "RedisKeys": "a value: the key layout, the same for both faces",
    "ShutdownReport": "a result: close returns it on both faces",
    "SystemClock": "serves both faces (the asyncio face sleeps with asyncio.sleep)",
    "acl_rules": "no I/O",
    "acl_setuser_line": "no I/O",
    "owner_fingerprint": "no I/O",
    "redact_text": "no I/O",
    "redact_url": "no I/O",
    "redis_keys": "no I/O",
    "url_from_env": "no I/O: reads the environment for both faces",
}

# Public members one face has and the other has not, per asyncio name, and why.
MEMBER_ONLY: dict[str, dict[str, str]] = {
    "AsyncClock": {"async_sleep": "the asyncio clock's sleep, awaited (AsyncClock extends Clock)"},
}

# Callables whose parameters or returns differ on purpose, by (asyncio name, member), and why.
SIGNATURE_ONLY: dict[tuple[str, str], str] = {
    ("AsyncMemoryBackend", "__init__"): "sync=: the MemoryBackend it runs inline (shared state)",
    ("AsyncSqliteBackend", "__init__"): (
        "sync=: an open SqliteBackend to run on a worker thread, so path may be None"
    ),
}

# Errors one face documents and the other does not, by (asyncio name, member or ""), and why.
RAISES_ONLY: dict[tuple[str, str], dict[str, str]] = {}

# Annotations that name the face's kind of thing, not a different thing: the asyncio name on the
# left is the sync one on the right once the face's prefix is erased (see _normalise).
_WRAPPERS = [
    (r"\bredis\.asyncio\.cluster\.RedisCluster\b", "redis.cluster.RedisCluster"),
    (r"\bredis\.asyncio\.", "redis."),
    (r"\bAbstractAsyncContextManager\b", "AbstractContextManager"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"(?:\b|(?<=_))Async(?=[A-Z])", ""),
]


def _normalise(annotation: object) -> str:
    """``annotation`` with what only names the face erased: ``Async`` prefixes, ``redis.asyncio``,
    async context managers and iterators, and ``Awaitable[...]`` around a type."""
    text = str(annotation)
    for pattern, repl in _WRAPPERS:
        text = re.sub(pattern, repl, text)
    while True:
        new = re.sub(r"Awaitable\[([^\[\]]*(?:\[[^\[\]]*\])?[^\[\]]*)\]", r"\1", text)
        if new == text:
            return text
        text = new


def _params(fn: Callable[..., Any]) -> list[tuple[str, object, object, str]]:
    return [
        (p.name, p.kind, p.default, _normalise(p.annotation))
        for p in inspect.signature(fn).parameters.values()
    ]


def _returns(fn: Callable[..., Any]) -> str:
    return _normalise(inspect.signature(fn).return_annotation)


def raised(obj: object) -> set[str]:
    """The error names of ``obj``'s docstring's ``Raises:`` section (``A, B: ...`` lists two)."""
    doc = inspect.getdoc(obj) or ""
    match = re.search(r"^Raises:\n((?:[ \t]+\S.*\n?|[ \t]*\n)*)", doc, re.MULTILINE)
    if match is None:
        return set()
    names: set[str] = set()
    for line in match.group(1).splitlines():
        entry = re.match(r"^ {4}(\w+(?:, \w+)*):", line)
        if entry:
            names.update(entry.group(1).split(", "))
    return names


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def _members(cls: type) -> dict[str, Any]:
    """The public callables of ``cls`` and ``__init__`` (a property: its getter)."""
    members: dict[str, Any] = {}
    for name in sorted(_public(cls) | {"__init__"}):
        static = inspect.getattr_static(cls, name)
        member = static.fget if isinstance(static, property) else getattr(cls, name)
        if callable(member) and not inspect.isclass(member):
            members[name] = member
    return members


@pytest.mark.parametrize("name", AIO_NAMES)
def test_every_asyncio_name_has_a_sync_twin(name: str) -> None:
    """Each public asyncio class or function has a sync twin of the same name without ``Async``."""
    sync = _twin(name)
    assert sync.__name__ == re.sub(r"^(Async|async_)", "", name)


def test_every_sync_name_has_an_asyncio_twin_or_a_reason() -> None:
    """A public sync name has an asyncio twin, is the same object on both faces, or is listed as
    sync-only with its reason."""
    twins = {_twin(name).__name__ for name in AIO_NAMES}
    shared = {
        n
        for n in fencedlease.aio.__all__
        if getattr(fencedlease, n, None) is getattr(fencedlease.aio, n)
    }
    alone = set(fencedlease.__all__) - twins - shared
    assert alone == set(SYNC_ONLY)


@pytest.mark.parametrize("name", [n for n in AIO_NAMES if inspect.isclass(_aio_object(n))])
def test_same_public_members(name: str) -> None:
    """A class's public members are the same on both faces, apart from the listed ones."""
    aio, sync = _aio_object(name), _twin(name)
    only = MEMBER_ONLY.get(name, {})
    assert _public(aio) ^ _public(sync) == set(only)


@pytest.mark.parametrize("name", AIO_NAMES)
def test_same_parameters_and_returns(name: str) -> None:
    """Every public callable takes the same parameters (names, kinds, defaults, annotations up to
    the face's wrappers) and returns the same type on both faces."""
    aio, sync = _aio_object(name), _twin(name)
    if not inspect.isclass(aio):
        assert _params(aio) == _params(sync)
        assert _returns(aio) == _returns(sync)
        return
    aio_members, sync_members = _members(aio), _members(sync)
    for member in sorted(aio_members.keys() & sync_members.keys()):
        if (name, member) in SIGNATURE_ONLY:
            continue
        assert _params(aio_members[member]) == _params(sync_members[member]), member
        assert _returns(aio_members[member]) == _returns(sync_members[member]), member


@pytest.mark.parametrize("name", AIO_NAMES)
def test_same_documented_errors(name: str) -> None:
    """Every public callable documents the same errors as raised (its ``Raises:`` section) on both
    faces."""
    aio, sync = _aio_object(name), _twin(name)
    pairs = [("", aio, sync)]
    if inspect.isclass(aio):
        aio_members, sync_members = _members(aio), _members(sync)
        shared = sorted(aio_members.keys() & sync_members.keys())
        pairs += [(member, aio_members[member], sync_members[member]) for member in shared]
    for member, aio_member, sync_member in pairs:
        only = set(RAISES_ONLY.get((name, member), {}))
        assert raised(aio_member) ^ raised(sync_member) == only, member or name


def test_raised_reads_a_raises_section() -> None:
    """``raised`` lists one name per entry and each name of an ``A, B:`` entry, not the text."""

    def documented() -> None:
        """Do it.

        Raises:
            ValidationError: a bad argument: see NotThis: here.
            LeaseLostError, BackendError: as before; more text
                ManagerClosedError: a continuation line, not an entry.
        """

    assert raised(documented) == {"ValidationError", "LeaseLostError", "BackendError"}
