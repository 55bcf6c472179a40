"""scripts/griffe_public.py: signatures as a caller reads them on the reference site, and the
backend methods documented by the protocol they implement.

Needs Griffe (in the ``test`` extra, and the ``docs`` one).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import griffe
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "griffe_public.py"
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def package() -> griffe.Module:
    spec = importlib.util.spec_from_file_location("griffe_public", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["griffe_public"] = module
    spec.loader.exec_module(module)
    try:
        loaded = griffe.load(
            "fencedlease",
            search_paths=[str(SRC)],
            extensions=griffe.load_extensions(module.PublicSignatures()),
        )
    finally:
        del sys.modules["griffe_public"]
    assert isinstance(loaded, griffe.Module)
    return loaded


FACES = ("_sync.manager.LeaseManager", "_async.manager.AsyncLeaseManager")


def _method(package: griffe.Module, face: str, name: str) -> griffe.Function:
    """``face``'s method ``name``, its own or inherited from the face's manager base (which is
    generated for the sync face)."""
    manager = package[face]
    assert isinstance(manager, griffe.Class)
    member = manager.all_members[name]
    method = member.final_target if isinstance(member, griffe.Alias) else member
    assert isinstance(method, griffe.Function)
    return method


def test_a_private_parameter_is_left_out_of_the_signature(package: griffe.Module) -> None:
    for face in FACES:
        init = _method(package, face, "__init__")
        assert [p.name for p in init.parameters] == [
            "self",
            "client",
            "prefix",
            "clock",
            "renew_batch_size",
            "on_event",
            "replica_acks",
            "replica_ack_timeout_ms",
            "fencing",
            "lock_delay_ms",
        ], face


def test_defaults_named_by_a_constant_show_its_value(package: griffe.Module) -> None:
    for face in FACES:
        acquire = _method(package, face, "acquire")
        defaults = {p.name: str(p.default) for p in acquire.parameters if p.default is not None}
        assert defaults == {
            "ttl_ms": "30000",
            "wait_ms": "0",
            "retry_delay_ms": "100",
            "metadata": "None",
            "lock_delay_ms": "None",
        }
        hold = _method(package, face, "hold")
        defaults = {p.name: str(p.default) for p in hold.parameters if p.default is not None}
        assert defaults["retry_delay_ms"] == "100"


def test_a_backend_method_without_a_docstring_takes_the_protocol_s(package: griffe.Module) -> None:
    sync_acquire = package["_sync.redis_backend.RedisBackend.acquire"].docstring
    protocol_acquire = package["_core.backend.LeaseBackend.acquire"].docstring
    async_release = package["_async.redis_backend.AsyncRedisBackend.release"].docstring
    assert sync_acquire is not None and protocol_acquire is not None
    assert sync_acquire.value == protocol_acquire.value
    assert async_release is not None
    assert async_release.value == "As [`LeaseBackend.release`][fencedlease.LeaseBackend.release]."
    # A method with its own docstring keeps it.
    memory_acquire = package["backends.memory.MemoryBackend.acquire"].docstring
    assert memory_acquire is not None
    assert memory_acquire.value.startswith("Grant ``key`` to ``owner_token``")
