"""The lab's partitions on real namespaces: a split cuts its sides apart both ways, leaves a
member on no side (and this process) reaching both, and its heal restores every path at once."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from conftest import unavailable
from fencedlease_lab.servers.netns import kernel_unavailable_reason
from fencedlease_lab.servers.partitions import Partitions
from fencedlease_lab.servers.redis import RedisUnavailable

pytestmark = [pytest.mark.live]

PORT = 7000
#: Listens on the member's address and accepts until killed.
LISTEN = (
    "import socket, sys; s = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2])));"
    " s.listen(); print('up', flush=True)\nwhile True: s.accept()[0].close()"
)
#: Exits 0 when a connection to the address opens within 0.3 s, 1 otherwise.
CONNECT = (
    "import socket, sys\ntry: socket.create_connection((sys.argv[1], int(sys.argv[2])), 0.3)"
    "\nexcept OSError: sys.exit(1)"
)


@pytest.fixture(scope="module")
def net() -> Iterator[Partitions]:
    """Three members, each listening on its own address; skipped without root, ``ip`` or
    ``nft``."""
    reason = kernel_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    try:
        partitions = Partitions(["a", "b", "c"]).start()
    except RedisUnavailable as exc:
        unavailable(str(exc))
    listeners = []
    try:
        for member in ("a", "b", "c"):
            process = partitions.popen(
                member,
                [sys.executable, "-S", "-c", LISTEN, partitions.address(member), str(PORT)],
                stdout=subprocess.PIPE,
                text=True,
            )
            listeners.append(process)
            assert process.stdout is not None and process.stdout.readline() == "up\n"
        yield partitions
    finally:
        for process in listeners:
            process.kill()
            process.wait()
        partitions.close()


def _reaches(net: Partitions, source: str | None, target: str) -> bool:
    """Whether ``source`` (None: this process) opens a connection to ``target``."""
    argv = [sys.executable, "-S", "-c", CONNECT, net.address(target), str(PORT)]
    process = subprocess.Popen(argv) if source is None else net.popen(source, argv)
    return process.wait(30) == 0


def test_a_split_cuts_both_ways_and_its_heal_restores_every_path(net: Partitions) -> None:
    """{a} against {b}: neither reaches the other, c (on no side) and this process reach both;
    once healed a and b reach each other again."""
    table = net.split({"a"}, {"b"})
    try:
        assert (_reaches(net, "a", "b"), _reaches(net, "b", "a")) == (False, False)
        assert [_reaches(net, "c", m) for m in ("a", "b")] == [True, True]
        assert [_reaches(net, m, "c") for m in ("a", "b")] == [True, True]
        assert [_reaches(net, None, m) for m in ("a", "b", "c")] == [True, True, True]
    finally:
        net.heal(table)
    assert (_reaches(net, "a", "b"), _reaches(net, "b", "a")) == (True, True)
