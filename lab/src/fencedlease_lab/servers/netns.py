"""Kernel network faults: each worker in a network namespace of its own, joined to the host by a
veth pair, and nftables rules that ``drop`` or ``reject`` its packets on that link.

Toxiproxy acts inside a proxy, on bytes; these act in the kernel, on packets, as Jepsen's
partitions do (Kingsbury, "Jepsen" analyses: each node its own network stack, iptables ``DROP``
between them). When a run asks for a kernel fault (and can have one),
[`WorkerLinks`][fencedlease_lab.servers.netns.WorkerLinks] gives worker ``i`` the namespace
``fencedlease-<run id>-w<i>`` and a veth pair (``fl<run id>h<i>`` on the host, ``fl<run id>n<i>``
inside) on a /30 of its own in 10.0.0.0/8; the worker enters its namespace first thing
([`enter_netns`][fencedlease_lab.servers.netns.enter_netns]) and reaches Redis through its
Toxiproxy proxy, which listens on the host end of its link. A rule on a link cuts off that worker
alone:

``kernel-drop``
    every packet from and to the worker's link is dropped: its requests and Redis's replies
    vanish, TCP retransmits into the void, new connections hang in ``SYN_SENT``;
``kernel-reject``
    every packet from the worker is answered with a TCP reset (``reject with tcp reset``):
    sends fail at once and new connections are refused.

The rules live in nftables tables of the run's own (named after
[`table_name`][fencedlease_lab.servers.netns.table_name], the run's random id in it; one per
cut, so that cuts of different workers in force together heal independently), in chains on the
``input`` and ``output`` hooks of the host; healing deletes the table, which removes its rules at
once. Needs root, ``ip`` and ``nft``
([`kernel_unavailable_reason`][fencedlease_lab.servers.netns.kernel_unavailable_reason]); a
worker in a namespace reaches nothing of the host but its proxy, so the resource must be the SQLite
file.

The same links, with their far ends in a hub namespace that routes between them (``hub`` of
[`WorkerLinks`][fencedlease_lab.servers.netns.WorkerLinks]), and a table in the hub that
drops what it forwards between sets of addresses
([`split`][fencedlease_lab.servers.netns.KernelFirewall.split]), make partitions of any
shape between servers and clients: [`Partitions`][fencedlease_lab.servers.partitions.Partitions].
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from typing import Final, Literal

import attrs

__all__ = [
    "KERNEL_ACTIONS",
    "KernelAction",
    "KernelFirewall",
    "Link",
    "WorkerLinks",
    "enter_netns",
    "ip_argv",
    "kernel_unavailable_reason",
    "table_name",
    "veth",
    "worker_links",
]

KernelAction = Literal["drop", "reject"]

#: Fault kind -> the nftables verdict it puts on the worker's packets.
KERNEL_ACTIONS: Final[dict[str, KernelAction]] = {"kernel-drop": "drop", "kernel-reject": "reject"}


#: The chain of a table for each hook it is on.
_CHAINS: Final[dict[str, str]] = {
    "input": "in",
    "output": "out",
    "forward": "cut",
}  # "fwd" is a word of nft's own

#: ``setns(2)``'s flag for a network namespace.
_CLONE_NEWNET: Final = 0x40000000


def kernel_unavailable_reason() -> str | None:
    """Why namespaces and nftables rules cannot be made here (not root, no ``ip``, no
    ``nft``), or None when they can."""
    if os.geteuid() != 0:
        return "needs root for network namespaces and nftables rules (run the check as root)"
    if shutil.which("ip") is None:
        return "needs the ip tool (apt-get install iproute2)"
    if shutil.which("nft") is None:
        return "needs the nft tool (apt-get install nftables)"
    return None


def _run(*argv: str) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=10.0, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


def enter_netns(name: str) -> None:
    """Move the calling thread into the network namespace ``name`` (``/run/netns/<name>``, as
    ``ip netns add`` makes it); threads and sockets it makes afterwards live there. Call it
    before any other thread or socket exists. Raises ``OSError`` when the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into network namespace {name}: {os.strerror(errno)}")
    finally:
        os.close(fd)


@attrs.frozen
class Link:
    """One worker's link: its namespace ``netns``, the veth ends ``host_if`` / ``ns_if`` and
    their addresses ``host_ip`` / ``ns_ip`` (a /30)."""

    netns: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str


def ip_argv(netns: str | None, *argv: str) -> list[str]:
    """``ip <argv>`` run in the network namespace ``netns`` (``ip -n``), or in this one (None)."""
    return ["ip", *(("-n", netns) if netns is not None else ()), *argv]


def veth(outer: tuple[str | None, str, str], inner: tuple[str | None, str, str]) -> None:
    """A veth pair between two namespaces, each end ``(netns, interface, address)`` (None: this
    process's namespace; not both), on a /30, up. Raises ``RuntimeError`` with ip's message."""
    (outer_ns, outer_if, _), (inner_ns, inner_if, _) = outer, inner
    # Made from a side this process can name (a namespace by its name, or its own).
    if inner_ns is not None:
        _run(*ip_argv(outer_ns, "link", "add", outer_if, "type", "veth",
                      "peer", "name", inner_if, "netns", inner_ns))  # fmt: skip
    else:
        _run(*ip_argv(None, "link", "add", inner_if, "type", "veth",
                      "peer", "name", outer_if, "netns", str(outer_ns)))  # fmt: skip
    for netns, name, address in (outer, inner):
        _run(*ip_argv(netns, "addr", "add", f"{address}/30", "dev", name))
        _run(*ip_argv(netns, "link", "set", name, "up"))


class WorkerLinks:
    """A namespace and a veth pair per worker (module docstring), made by
    [`make`][fencedlease_lab.servers.netns.WorkerLinks.make] and all removed by
    [`close`][fencedlease_lab.servers.netns.WorkerLinks.close] (deleting a namespace deletes
    its veth pair). Raises ``RuntimeError`` with the tool's message when a step fails (what was made
    is removed).

    ``hub``: a namespace (made by the caller) to put the links' host ends in instead of this
    process's; each worker's namespace then routes everything through its link (a default route),
    so the hub, forwarding, joins them all.
    """

    def __init__(self, run_id: str, workers: int, *, hub: str | None = None) -> None:
        if workers > 60:
            raise ValueError(f"at most 60 workers get a link of their own, not {workers}")
        code = int(run_id[:4], 16)
        self.net = f"10.{64 + (code >> 8) % 128}.{code & 0xFF}"
        self.hub = hub
        self.links = [
            Link(
                f"fencedlease-{run_id}-w{i}", f"fl{run_id}h{i}", f"fl{run_id}n{i}",
                f"{self.net}.{4 * i + 1}", f"{self.net}.{4 * i + 2}",
            )
            for i in range(workers)
        ]  # fmt: skip
        self._made: list[str] = []

    def make(self) -> WorkerLinks:
        """Make every namespace and link, up and addressed; returns itself."""
        try:
            for link in self.links:
                _run("ip", "netns", "add", link.netns)
                self._made.append(link.netns)
                veth((self.hub, link.host_if, link.host_ip), (link.netns, link.ns_if, link.ns_ip))
                _run("ip", "-n", link.netns, "link", "set", "lo", "up")
                if self.hub is not None:
                    _run("ip", "-n", link.netns, "route", "add", "default", "via", link.host_ip)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Delete every namespace made (and so its link). Idempotent."""
        while self._made:
            with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
                _run("ip", "netns", "del", self._made.pop())


def worker_links(
    faults: Sequence[str], workers: int, run_id: str, *, resource: str, toxiproxy: bool
) -> tuple[WorkerLinks | None, str | None]:
    """The links of a run's ``workers`` (made), when its ``faults`` hold a kernel kind and it
    can have them: root, ``ip`` and ``nft``, an SQLite ``resource`` (``sqlite``, ``sqlite-rows``,
    ``sqlite-append``: a file, as a worker in its namespace reaches only its proxy) and
    ``toxiproxy``. Else ``(None, why)``; ``(None, None)`` when no kernel kind was asked for. The
    caller closes what it gets."""
    if not any(kind in KERNEL_ACTIONS for kind in faults):
        return None, None
    reason = kernel_unavailable_reason()
    if reason is None and not resource.startswith("sqlite"):
        reason = "needs an SQLite resource (a worker in its namespace reaches only its proxy)"
    if reason is None and not toxiproxy:
        reason = "needs a Toxiproxy proxy per worker (on the host end of its link)"
    if reason is not None:
        return None, reason
    try:
        return WorkerLinks(run_id, workers).make(), None
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
        return None, f"could not make the workers' links: {exc}"


def table_name(run_id: str) -> str:
    """The nftables table of the run whose random id is ``run_id`` (hex)."""
    return f"fencedlease_{run_id}"


class KernelFirewall:
    """The run's nftables tables (family ``inet``), one per cut, so that cuts in force together
    (of different workers) heal independently:
    [`cut`][fencedlease_lab.servers.netns.KernelFirewall.cut] makes a table
    ``<table_name(run_id)>_<n>`` with rules for one worker's link,
    [`heal`][fencedlease_lab.servers.netns.KernelFirewall.heal] deletes it,
    [`heal_all`][fencedlease_lab.servers.netns.KernelFirewall.heal_all] deletes every one
    still there. Raises ``RuntimeError`` with nft's message when a command fails."""

    def __init__(self, run_id: str, *, netns: str | None = None) -> None:
        self.prefix = table_name(run_id)
        self.netns = netns  # where the tables live (None: this process's namespace)
        self._made: set[str] = set()
        self._count = 0
        self._lock = threading.Lock()

    def _nft(self, *args: str) -> None:
        if self.netns is None:
            _run("nft", *args)
        else:
            _run("ip", "netns", "exec", self.netns, "nft", *args)

    def _table(self, hooks: Sequence[str]) -> str:
        """A new table of the run's with a chain named after each hook (``input`` -> ``in``)."""
        with self._lock:
            table = f"{self.prefix}_{self._count}"
            self._count += 1
            self._made.add(table)
        self._nft("add", "table", "inet", table)
        for hook in hooks:
            self._nft(
                "add", "chain", "inet", table, _CHAINS[hook],
                f"{{ type filter hook {hook} priority 0 ; policy accept ; }}",
            )  # fmt: skip
        return table

    def cut(self, host_if: str, action: KernelAction) -> tuple[str, list[str]]:
        """Cut the worker whose link's host end is ``host_if`` with ``action``; returns the
        table made and the rules added in it, as ``"<chain>: <rule>"``."""
        table = self._table(("input", "output"))
        if action == "drop":
            rules = [("in", f'iifname "{host_if}" drop'), ("out", f'oifname "{host_if}" drop')]
        else:
            # Not the other direction too: the resets made here leave through the link.
            rules = [("in", f'iifname "{host_if}" meta l4proto tcp reject with tcp reset')]
        for chain, rule in rules:
            self._nft("add", "rule", "inet", table, chain, *rule.split())
        return table, [f"{chain}: {rule}" for chain, rule in rules]

    def split(self, sides: Sequence[Sequence[str]]) -> tuple[str, list[str]]:
        """Drop every packet the hub forwards between addresses of two different ``sides``
        (IPv4 addresses; at least two sides, none empty), both ways: a partition of any shape;
        addresses on no side keep reaching every side. Returns the table and its rules, as
        [`cut`][fencedlease_lab.servers.netns.KernelFirewall.cut] does.

        Raises:
            ValueError: fewer than two sides, or an empty one.
        """
        if len(sides) < 2 or not all(sides):
            raise ValueError(f"a split needs two sides or more, none empty; got {sides!r}")
        table = self._table(("forward",))
        rules = []
        for i, source in enumerate(sides):
            others = [address for j, side in enumerate(sides) if j != i for address in side]
            rule = f"ip saddr {{ {', '.join(source)} }} ip daddr {{ {', '.join(others)} }} drop"
            self._nft("add", "rule", "inet", table, _CHAINS["forward"], *rule.split())
            rules.append(f"{_CHAINS['forward']}: {rule}")
        return table, rules

    def heal(self, table: str) -> None:
        """Delete ``table`` (one
        [`cut`][fencedlease_lab.servers.netns.KernelFirewall.cut]'s) and so its rules;
        nothing if it is gone."""
        with self._lock:
            if table not in self._made:
                return
            self._made.discard(table)
        self._nft("delete", "table", "inet", table)

    def heal_all(self) -> None:
        """Delete every table still there (each tried even if another fails)."""
        for table in sorted(self._made):
            with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
                self.heal(table)
