"""Partitions of any shape between servers and clients of our own: each member (a Redis server, a
sentinel, a client process) in a network namespace of its own, all joined by a hub namespace that
routes between them, and nftables rules in the hub that cut any sets of members from each other.

Jepsen's way of partitioning a cluster (Kingsbury, "Jepsen" analyses: each node its own network
stack, packets dropped between the sides), on one machine. The namespaces, veth pairs and nft
tables are those of the harness's kernel faults
([`netns`][fencedlease_lab.servers.netns]): member ``i`` gets the namespace
``fencedlease-<run id>-w<i>`` and a /30 link whose far end is in the hub
(``fencedlease-<run id>-hub``, forwarding on, its own sysctl: this process's namespace forwards
nothing). This process is joined to the hub by one more link (and a route to the members' /24), so
it reaches every member, whatever the partition: it is on no side.

```
with Partitions(["primary", "replica-0", "sentinel-0", "client-a", ...]) as net:
    deployment = SentinelDeployment(placements=net.placement, ...)    # each in its namespace
    client = net.popen("client-a", [sys.executable, "-m", ...])       # so is this process
    table = net.split({"primary", "replica-0", "client-a"}, {...})    # cut apart, both ways
    net.heal(table)                                                   # delete the table
```

A packet between two members on different sides of a split is dropped by the hub (``drop``: the
sender sees no reset, TCP retransmits into the void, a connect hangs), both ways; members on no
side reach both. Several splits may be in force together, each healed on its own. Needs root,
``ip`` and ``nft``
([`kernel_unavailable_reason`][fencedlease_lab.servers.netns.kernel_unavailable_reason]).
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Collection, Sequence
from typing import Any

from .netns import (
    KernelFirewall,
    Link,
    WorkerLinks,
    kernel_unavailable_reason,
    veth,
)
from .redis import Placement, RedisUnavailable

__all__ = ["Partitions", "PartitionsUnavailable"]


class PartitionsUnavailable(RedisUnavailable):
    """Namespaces and nftables rules cannot be made here (not root, no ``ip``, no ``nft``), or a
    step failed; the message says which."""


def _run(*argv: str) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=10.0, check=False)
    if done.returncode != 0:
        raise PartitionsUnavailable(f"{' '.join(argv)}: {done.stderr.strip()}")


class Partitions:
    """``members`` (distinct names, at most 59), each in a network namespace of its own behind a
    hub (module docstring); made by [`start`][fencedlease_lab.servers.partitions.Partitions.start]
    (or on entry), all removed by [`close`][fencedlease_lab.servers.partitions.Partitions.close]
    (or on exit). ``run_id``: 8 hex digits naming the namespaces, links and tables (random by
    default).

    Raises:
        ValueError: a name given twice, or more than 59 members.
    """

    def __init__(self, members: Sequence[str], *, run_id: str | None = None) -> None:
        if len(set(members)) != len(members):
            raise ValueError(f"members must be distinct; got {list(members)!r}")
        if len(members) > 59:
            raise ValueError(f"at most 59 members get a namespace of their own, not {len(members)}")
        self.run_id = run_id or secrets.token_hex(4)
        self.hub = f"fencedlease-{self.run_id}-hub"
        self._links = WorkerLinks(self.run_id, len(members) + 1, hub=self.hub)
        # The last link is this process's: its near end stays in this namespace.
        self._control: Link = self._links.links.pop()
        self.links = dict(zip(members, self._links.links, strict=True))
        self.firewall = KernelFirewall(self.run_id, netns=self.hub)
        self._hub_made = False

    def placement(self, member: str) -> Placement:
        """Where ``member`` runs: its namespace and its address there (for
        [`RedisServer`][fencedlease_lab.servers.redis.RedisServer]'s ``placement``, and the
        deployments' ``placements``)."""
        link = self.links[member]
        return Placement(link.ns_ip, link.netns)

    def address(self, member: str) -> str:
        """``member``'s address (IPv4)."""
        return self.links[member].ns_ip

    def popen(self, member: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in ``member``'s namespace (``kwargs`` go to ``subprocess.Popen``)."""
        return subprocess.Popen(self.placement(member).argv(argv), **kwargs)

    def start(self) -> Partitions:
        """Make the hub (forwarding), every member's namespace and link, and this process's link
        and route to them; returns itself.

        Raises:
            PartitionsUnavailable: not root, no ``ip`` or ``nft``, or a step failed (what was made
                is removed).
        """
        reason = kernel_unavailable_reason()
        if reason is not None:
            raise PartitionsUnavailable(reason)
        try:
            _run("ip", "netns", "add", self.hub)
            self._hub_made = True
            _run("ip", "netns", "exec", self.hub, "sh", "-c",
                 "echo 1 > /proc/sys/net/ipv4/ip_forward")  # fmt: skip
            self._links.make()
            control = self._control
            veth((self.hub, control.host_if, control.host_ip), (None, control.ns_if, control.ns_ip))
            _run("ip", "route", "add", f"{self._links.net}.0/24", "via", control.host_ip)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            self.close()
            if isinstance(exc, PartitionsUnavailable):
                raise
            raise PartitionsUnavailable(f"could not make the namespaces: {exc}") from exc
        except BaseException:
            self.close()
            raise
        return self

    def split(self, *sides: Collection[str]) -> str:
        """Cut the members of each of ``sides`` (two or more, disjoint, none empty) off from every
        other side's, both ways; members on no side (and this process) reach every side. Returns
        the nft table that holds the rules:
        [`heal`][fencedlease_lab.servers.partitions.Partitions.heal] it.

        Raises:
            ValueError: fewer than two sides, an empty one, a member on two sides.
            KeyError: a name that is no member.
        """
        named = [member for side in sides for member in side]
        if len(set(named)) != len(named):
            raise ValueError(f"a member is on two sides: {[sorted(side) for side in sides]!r}")
        addresses = [[self.address(member) for member in sorted(side)] for side in sides]
        table, _rules = self.firewall.split(addresses)
        return table

    def heal(self, table: str) -> None:
        """Delete a [`split`][fencedlease_lab.servers.partitions.Partitions.split]'s table: its
        sides reach each other again at once."""
        self.firewall.heal(table)

    def close(self) -> None:
        """Heal every split, delete every namespace (and so every link, and the route).
        Idempotent."""
        self.firewall.heal_all()
        self._links.close()
        if self._hub_made:
            with contextlib.suppress(RuntimeError):
                _run("ip", "netns", "del", self.hub)
            self._hub_made = False

    def __enter__(self) -> Partitions:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
