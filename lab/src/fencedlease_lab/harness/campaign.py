"""Replays and campaigns: ``fencedlease check --replay report.json`` and ``--runs N``.

A replay runs again what a ``report.json`` records: its seed (the workers' random sources are
seeded from it and their index), its settings and its fault schedule
([`Schedule`][fencedlease_lab.harness.schedule.Schedule]), so the faults are the same kinds, on the
same worker indexes, at the same offsets, for the same durations. What the machine's timing
decides (which grant a fault meets) may differ; the schedule does not.

A campaign is ``N`` runs of seeds ``seed``, ``seed + 1``, ... each in its own subdirectory
``seed-<seed>`` of the campaign's directory, summed up in ``campaign.json`` (one row per run:
seed, verdict, violations, operations, faults) beside them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from .history import read_history
from .model import CheckConfig, CheckResult
from .safety import OUT_MARKER, check_out_dir
from .schedule import Schedule

__all__ = [
    "REPLAYED",
    "CampaignRow",
    "campaign_exit_code",
    "read_replay",
    "run_campaign",
    "write_campaign",
]

#: The settings a replay takes from ``report.json`` (``config``) unless given anew.
REPLAYED: Final = (
    "redis_url", "workers", "duration_s", "faults", "mode", "resource", "resource_url", "ttl_ms",
    "heartbeat_ms", "body_ms", "margin_ms", "key", "toxiproxy", "lead_s", "allow_server_faults",
    "workers_kind", "wait_share", "keys", "topology", "replica_acks", "fencing",
    "stale_share",
)  # fmt: skip


def read_replay(path: str | Path, given: Mapping[str, Any]) -> CheckConfig:
    """The [`CheckConfig`][fencedlease_lab.harness.CheckConfig] that replays the run ``path`` (a
    ``report.json``) records: its seed, schedule and
    [`REPLAYED`][fencedlease_lab.harness.campaign.REPLAYED] settings, except those in ``given``
    (options given anew: ``out_dir`` always, ``redis_url`` when the recorded one hid a password).

    Raises:
        ValueError: the file is not a report of ``fencedlease check`` (no seed, schedule or
            settings), or a URL it records had its password hidden and none was given anew.
    """
    try:
        report = json.loads(Path(path).read_text("utf-8"))
        recorded = report["config"]
        seed = int(report["seed"])
        schedule = Schedule.from_dict(report["schedule"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a report.json of fencedlease check: {exc}") from None
    fields = {name: recorded[name] for name in REPLAYED if name in recorded}
    fields["faults"] = tuple(fields.get("faults", ()))
    fields.update(given)
    for name in ("redis_url", "resource_url"):
        if "***" in str(fields.get(name) or ""):
            flag = name.replace("_", "-")
            raise ValueError(f"{path} records --{flag} with its password hidden; give --{flag}")
    return CheckConfig(**{**fields, "seed": seed, "schedule": schedule})


@attrs.frozen
class CampaignRow:
    """One run of a campaign: its ``seed``, ``verdict`` (``pass``, ``fail``, ``inconclusive``,
    or ``error`` when it could not be done, with the ``error``), ``violations``,
    ``operations`` (invocations in its history), ``faults`` injected, its ``out_dir`` and
    ``exit_code`` (as ``fencedlease check``'s)."""

    seed: int
    verdict: str
    violations: int
    operations: int
    faults: int
    out_dir: str
    exit_code: int
    error: str | None = None


def _row(seed: int, out_dir: Path, result: CheckResult) -> CampaignRow:
    operations = sum(1 for event in read_history(result.history_path) if event.type == "invoke")
    return CampaignRow(
        seed,
        {0: "pass", 1: "fail", 2: "inconclusive"}[result.exit_code],
        len(result.report.violations),
        operations,
        int(result.report.stats["faults_injected"]),
        str(out_dir),
        result.exit_code,
    )


def run_campaign(
    config: CheckConfig,
    runs: int,
    run: Callable[[CheckConfig], CheckResult],
    *,
    on_row: Callable[[CampaignRow], None] | None = None,
    errors: tuple[type[BaseException], ...] = (),
) -> list[CampaignRow]:
    """Run ``config`` ``runs`` times with seeds ``config.seed``, ``config.seed + 1``, ... (a
    seed must be given), each with ``run`` ([`run_check`][fencedlease_lab.harness.run_check] or
    a wrapper) in ``<out_dir>/seed-<seed>``; a run raising one of ``errors`` is a row with
    verdict ``error``. Writes ``campaign.json`` after each run; calls ``on_row`` with each row.

    Raises:
        ValueError: ``runs`` below 1, no seed, or a schedule given (a replay is one run).
        UnsafeTargetError: ``out_dir`` holds files the check did not make.
    """
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    if config.seed is None or config.schedule is not None:
        raise ValueError("a campaign needs a first seed and draws its own schedules")
    root = Path(config.out_dir)
    check_out_dir(root)
    root.mkdir(parents=True, exist_ok=True)
    marker = root / OUT_MARKER
    if not marker.exists():
        marker.write_text("made by fencedlease check: a campaign, one seed-* per run\n", "utf-8")
    rows: list[CampaignRow] = []
    for seed in range(config.seed, config.seed + runs):
        out_dir = root / f"seed-{seed}"
        try:
            result = run(attrs.evolve(config, seed=seed, out_dir=out_dir))
            row = _row(seed, out_dir, result)
        except errors as exc:
            row = CampaignRow(
                seed, "error", 0, 0, 0, str(out_dir), 2, f"{type(exc).__name__}: {exc}"
            )
        rows.append(row)
        write_campaign(root / "campaign.json", rows)
        if on_row is not None:
            on_row(row)
    return rows


def write_campaign(path: Path, rows: list[CampaignRow]) -> None:
    """Write ``campaign.json``: the rows and the campaign's exit code."""
    data = {"exit_code": campaign_exit_code(rows), "runs": [attrs.asdict(row) for row in rows]}
    path.write_text(json.dumps(data, indent=2) + "\n", "utf-8")


def campaign_exit_code(rows: list[CampaignRow]) -> int:
    """1 when some run found violations; else 2 when some run proved nothing or could not be
    done; else 0."""
    if any(row.exit_code == 1 for row in rows):
        return 1
    return 2 if any(row.exit_code != 0 for row in rows) else 0
