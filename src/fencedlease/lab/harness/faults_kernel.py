"""Kernel network faults: nftables rules that ``drop`` or ``reject`` one worker's packets to Redis.

Toxiproxy acts inside a proxy, on bytes; these act in the kernel, on packets, as Jepsen's
partitions do (Kingsbury, "Jepsen" analyses: iptables ``DROP`` between nodes). Each worker
reaches Redis through a port of its own (its Toxiproxy proxy's listener), so a rule on that
port cuts off that worker alone:

``kernel-drop``
    every packet to and from the port is dropped: the worker's requests and Redis's replies
    vanish, TCP retransmits into the void, new connections hang in ``SYN_SENT``;
``kernel-reject``
    every packet to the port is answered with a TCP reset (``reject with tcp reset``): sends
    fail at once and new connections are refused.

The rules live in an nftables table of the run's own (:func:`table_name`, the run's random id in
it), in a chain on the ``output`` hook (loopback packets pass it in both directions); healing
deletes the table, which removes every rule at once. Needs root and the ``nft`` tool
(:func:`kernel_unavailable_reason`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Final, Literal

__all__ = [
    "KERNEL_ACTIONS",
    "KernelAction",
    "KernelFirewall",
    "kernel_unavailable_reason",
    "table_name",
]

KernelAction = Literal["drop", "reject"]

#: Fault kind -> the nftables verdict it puts on the worker's packets.
KERNEL_ACTIONS: Final[dict[str, KernelAction]] = {"kernel-drop": "drop", "kernel-reject": "reject"}


def kernel_unavailable_reason() -> str | None:
    """Why nftables rules cannot be set here (not root, no ``nft``), or None when they can."""
    if os.geteuid() != 0:
        return "needs root to set nftables rules (run the check as root)"
    if shutil.which("nft") is None:
        return "needs the nft tool (apt-get install nftables)"
    return None


def table_name(run_id: str) -> str:
    """The nftables table of the run whose random id is ``run_id`` (hex)."""
    return f"fencedlease_{run_id}"


class KernelFirewall:
    """The run's own nftables table (family ``inet``): :meth:`cut` adds rules for one port,
    :meth:`heal` deletes the table. Raises ``RuntimeError`` with nft's message when a command
    fails."""

    def __init__(self, run_id: str) -> None:
        self.table = table_name(run_id)
        self._made = False

    def _nft(self, *args: str) -> None:
        done = subprocess.run(
            ["nft", *args], capture_output=True, text=True, timeout=10.0, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"nft {' '.join(args)}: {done.stderr.strip()}")

    def cut(self, port: int, action: KernelAction) -> list[str]:
        """Cut the TCP traffic of local ``port`` with ``action``; the rules added, as nft text."""
        if not 0 < port < 65536:
            raise ValueError(f"port must be 1..65535, got {port}")
        self._nft("add", "table", "inet", self.table)
        self._made = True
        self._nft(
            "add", "chain", "inet", self.table, "out",
            "{ type filter hook output priority 0 ; policy accept ; }",
        )  # fmt: skip
        if action == "drop":
            rules = [f"tcp dport {port} drop", f"tcp sport {port} drop"]
        else:
            # Not the other direction too: the resets made here leave from the port.
            rules = [f"tcp dport {port} reject with tcp reset"]
        for rule in rules:
            self._nft("add", "rule", "inet", self.table, "out", *rule.split())
        return rules

    def heal(self) -> None:
        """Delete the run's table and so every rule in it (nothing when none was made)."""
        if self._made:
            self._nft("delete", "table", "inet", self.table)
            self._made = False
