"""The kernel faults: ``kernel-drop`` and ``kernel-reject``, an nftables table of their own per cut
([`netns`][fencedlease_lab.servers.netns])."""

from __future__ import annotations

import threading

from ...servers.netns import KERNEL_ACTIONS
from ..history import Operation
from .core import NemesisCore
from .env import FaultSpec


class KernelActions(NemesisCore):
    """The action of the kernel faults: nftables rules cutting the victim's link."""

    def _kernel(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        assert target is not None
        link = self.env.kernel_links[target]
        table, rules = self._firewall.cut(link.host_if, KERNEL_ACTIONS[spec.kind])
        try:
            stop.wait(spec.duration_s)
        finally:
            self._firewall.heal(table)
        self._finish(op, table=table, link=link.host_if, rules=rules)

    _do_kernel_drop = _kernel
    _do_kernel_reject = _kernel
