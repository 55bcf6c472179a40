"""Kernel network faults: each worker in a network namespace with a veth link to the host, and
nftables ``drop`` / ``reject`` rules on the holder's link. Root, ``ip`` and ``nft`` are needed;
without them the kinds are skipped, and a run that asks for them says why."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Callable

import pytest

from fencedlease_lab.harness.history import read_history
from fencedlease_lab.harness.run import CheckResult
from fencedlease_lab.servers.netns import KernelFirewall, kernel_unavailable_reason

from .conftest import assert_told_in_time, the_fault, victim_of

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]


@pytest.mark.parametrize("kind", ["kernel-drop", "kernel-reject"])
def test_kernel_cut_holder_is_told_within_ttl_plus_heartbeat(
    check_run: RunCheck, kind: str
) -> None:
    reason = kernel_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    result = check_run(kind)
    data, fault = the_fault(result, kind)
    index = int(str(fault.target).removeprefix("w"))
    link = fault.detail["link"]
    assert link.endswith(f"h{index}")
    if kind == "kernel-drop":
        assert fault.detail["rules"] == [
            f'in: iifname "{link}" drop',
            f'out: oifname "{link}" drop',
        ]
    else:
        assert fault.detail["rules"] == [
            f'in: iifname "{link}" meta l4proto tcp reject with tcp reset'
        ]
    victim = victim_of(data, fault)
    assert_told_in_time(result, fault, victim)
    # How the cut looked to the holder: refused at once (reject), or silence (drop).
    errors = [
        str(e.detail.get("error"))
        for e in read_history(result.history_path)
        if e.process == victim.process and e.op == "renew" and e.type == "info"
        and e.outcome == "error" and fault.start < e.mono < (fault.end or 0.0)
    ]  # fmt: skip
    refused = [error for error in errors if "Connection refused" in error]
    if kind == "kernel-reject":
        assert refused, errors
    else:
        assert not refused, errors
    # Nothing of the run is left in the kernel: its tables and namespaces are gone.
    run_id = fault.detail["table"].split("_")[1]
    assert fault.detail["table"] == f"fencedlease_{run_id}_0"
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True)
    assert run_id not in tables.stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert run_id not in spaces.stdout


def test_kernel_faults_without_their_links_are_skipped_with_the_reason(
    check_run: RunCheck,
) -> None:
    """Without a Toxiproxy proxy per worker (or root, or nft) there is no link to cut: the
    fault is skipped, the note says why, and the run proved nothing."""
    result = check_run("kernel-drop", duration_s=3.0, toxiproxy=False)
    assert result.history().faults == []
    expected = kernel_unavailable_reason() or (
        "needs a Toxiproxy proxy per worker (on the host end of its link)"
    )
    assert f"fault kernel-drop skipped: {expected}" in result.notes
    assert result.inconclusive == ("no fault was injected though faults were asked for",)
    assert result.exit_code == 2


def test_cuts_in_force_together_heal_one_by_one() -> None:
    """Two workers cut at once: healing one leaves the other's rules in place; heal_all clears
    what is left."""
    reason = kernel_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    firewall = KernelFirewall(secrets.token_hex(4))

    def tables() -> list[str]:
        argv = ["nft", "list", "tables"]
        listed = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        return sorted(line.split()[-1] for line in listed.splitlines() if firewall.prefix in line)

    try:
        first, rules = firewall.cut("flnotthere0", "drop")
        second, _ = firewall.cut("flnotthere1", "reject")
        assert rules == ['in: iifname "flnotthere0" drop', 'out: oifname "flnotthere0" drop']
        assert tables() == [first, second]
        firewall.heal(first)
        assert tables() == [second]
        firewall.heal(first)  # a second heal of the same cut does nothing
        assert tables() == [second]
    finally:
        firewall.heal_all()
    assert tables() == []
