"""scripts/griffe_rst.py: the reST-flavoured docstrings as the reference site renders them.

Needs Griffe (the ``docs`` extra, which CI installs); skipped without it.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("griffe")
import griffe

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "griffe_rst.py"
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def rst() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("griffe_rst", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["griffe_rst"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["griffe_rst"]


def test_roles_become_cross_references(rst: ModuleType) -> None:
    text = (
        "See :class:`~fencedlease.Lease`, :meth:`hold`, :func:`fencedlease.db.fence_guard`, "
        ":class:`the manager <fencedlease.LeaseManager>` and :func:`!time.time`."
    )
    assert rst.rst_to_markdown(text) == (
        "See [`Lease`][fencedlease.Lease], [`hold`][hold], "
        "[`fencedlease.db.fence_guard`][fencedlease.db.fence_guard], "
        "[`the manager`][fencedlease.LeaseManager] and `time.time`."
    )


def test_a_target_resolved_to_none_is_plain_code(rst: ModuleType) -> None:
    assert rst.rst_to_markdown(":func:`~a._private.thing`", lambda target: None) == "`thing`"


def test_a_literal_block_becomes_a_fenced_block(rst: ModuleType) -> None:
    text = "Accepted URLs::\n\n    redis://host\n      memory://\n\nAfter, :mod:`x`."
    assert rst.rst_to_markdown(text) == (
        "Accepted URLs:\n\n```\nredis://host\n  memory://\n```\n\nAfter, [`x`][x]."
    )


def test_a_lone_double_colon_vanishes_and_roles_inside_code_stay(rst: ModuleType) -> None:
    text = "Tree:\n\n::\n\n    A\n    └── :class:`B`\n"
    assert rst.rst_to_markdown(text) == "Tree:\n\n```\nA\n└── :class:`B`\n```\n"


def test_a_simple_table_becomes_a_pipe_table(rst: ModuleType) -> None:
    text = (
        "Keys:\n\n"
        "=========  =============\n"
        "``<base>``  the lease\n"
        "``:fence``  the counter,\n"
        "            never deleted\n"
        "=========  =============\n\n"
        "Done."
    )
    assert rst.rst_to_markdown(text) == (
        "Keys:\n\n"
        "|  |  |\n"
        "| --- | --- |\n"
        "| ``<base>`` | the lease |\n"
        "| ``:fence`` | the counter, never deleted |\n\n"
        "Done."
    )


def test_a_table_with_a_header(rst: ModuleType) -> None:
    text = "=====  =====\nkind   what\n=====  =====\na|b    one\n=====  =====\n"
    assert rst.rst_to_markdown(text) == ("| kind | what |\n| --- | --- |\n| a\\|b | one |\n")


@pytest.fixture(scope="module")
def package(rst: ModuleType) -> griffe.Module:
    loaded = griffe.load(
        "fencedlease",
        search_paths=[str(SRC)],
        extensions=griffe.load_extensions(rst.RstToMarkdown()),
    )
    assert isinstance(loaded, griffe.Module)
    return loaded


def test_targets_resolve_to_the_documented_public_names(package: griffe.Module) -> None:
    lease = package["_lease.Lease"].docstring
    assert lease is not None
    # Inherited from a private base: linked under the public class.
    assert "[`check`][fencedlease.Lease.check]" in lease.value
    # A private class no public module exports: plain code, no link.
    assert "`LeaseView`" in lease.value
    assert "[`LeaseView`]" not in lease.value


def test_a_stdlib_target_is_plain_code(package: griffe.Module) -> None:
    clock = package["_clock.SystemClock"].docstring
    assert clock is not None
    assert clock.value.startswith(
        "The real clock: `time.monotonic`, `time.time` and `time.sleep`. (The\n"
        "asyncio face waits on `asyncio.sleep` with it"
    )


def test_a_private_parameter_is_left_out_of_the_signature(package: griffe.Module) -> None:
    init = package["_manager.LeaseManager.__init__"]
    assert isinstance(init, griffe.Function)
    assert [p.name for p in init.parameters] == [
        "self",
        "client",
        "prefix",
        "clock",
        "renew_batch_size",
    ]


def test_defaults_named_by_a_constant_show_its_value(package: griffe.Module) -> None:
    for face in ("_manager.LeaseManager", "aio._manager.AsyncLeaseManager"):
        manager = package[face]
        assert isinstance(manager, griffe.Class)
        # acquire is inherited from the face's manager base: its own defaults are rendered.
        member = manager.all_members["acquire"]
        acquire = member.final_target if isinstance(member, griffe.Alias) else member
        assert isinstance(acquire, griffe.Function)
        defaults = {p.name: str(p.default) for p in acquire.parameters if p.default is not None}
        assert defaults == {"ttl_ms": "30000", "wait_ms": "0", "retry_delay_ms": "100"}
        hold = manager.members["hold"]
        assert isinstance(hold, griffe.Function)
        defaults = {p.name: str(p.default) for p in hold.parameters if p.default is not None}
        assert defaults["retry_delay_ms"] == "100"


def test_a_backend_method_without_a_docstring_takes_the_protocol_s(package: griffe.Module) -> None:
    sync_acquire = package["_redis_backend.RedisBackend.acquire"].docstring
    protocol_acquire = package["_backend.LeaseBackend.acquire"].docstring
    async_release = package["aio._redis_backend.AsyncRedisBackend.release"].docstring
    assert sync_acquire is not None and protocol_acquire is not None
    assert sync_acquire.value == protocol_acquire.value
    assert async_release is not None
    assert async_release.value == "As [`LeaseBackend.release`][fencedlease.LeaseBackend.release]."
    # A method with its own docstring keeps it.
    memory_acquire = package["backends.memory.MemoryBackend.acquire"].docstring
    assert memory_acquire is not None
    assert memory_acquire.value.startswith("Grant ``key`` to ``owner_token``")
