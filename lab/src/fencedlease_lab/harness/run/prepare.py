"""Before anything starts: the config and the targets checked (no I/O but the SQLite check), the
output directory claimed, and the run's settings, seed and notes (`_Run`)."""

from __future__ import annotations

import random
import secrets
from pathlib import Path

import attrs

from fencedlease import redact_text

from ...servers.netns import Link
from ..environment import check_redis_url
from ..faults_clock import WallClock
from ..model import CheckConfig
from ..safety import check_sqlite_resource, claim_out_dir
from ..schedule import Schedule
from ..topology import check_topology
from ..workload import WORKER_KINDS, WorkerKind


@attrs.define
class _Run:
    """One run's settings, its seed, where its files go, and the notes it gathers."""

    config: CheckConfig
    seed: int
    out_dir: Path
    parts_dir: Path
    secret_urls: list[str]
    run_id: str = attrs.field(factory=lambda: secrets.token_hex(4))
    notes: list[str] = attrs.field(factory=list)
    left_out: list[str] = attrs.field(factory=list)
    schedule: Schedule | None = None
    kernel_links: list[Link] = attrs.field(factory=list)
    kernel_reason: str | None = None
    #: The workers' wall clock (libfaketime), made when they start; None without libfaketime.
    wall_clock: WallClock | None = None

    @property
    def prefix(self) -> str:
        return f"fencedlease-check:{self.run_id}"

    @property
    def names(self) -> list[str]:
        return [f"w{i}" for i in range(self.config.workers)]

    @property
    def worker_kinds(self) -> list[WorkerKind]:
        """How each worker runs: the config's ``workers_kind``, else dealt from the seed: the
        kinds in turn (so that every kind runs when there are workers enough), in a seeded
        order of the workers (the same seed gives the same kinds)."""
        forced = self.config.workers_kind
        if forced is not None:
            return [forced] * self.config.workers
        count = self.config.workers
        kinds = [WORKER_KINDS[i % len(WORKER_KINDS)] for i in range(count)]
        random.Random(f"{self.seed}:kinds").shuffle(kinds)
        return kinds

    def scrub(self, text: str) -> str:
        """``text`` without the secrets of the URLs the run was given (notes, history)."""
        for url in self.secret_urls:
            text = redact_text(text, url)
        return text


def _begin(config: CheckConfig) -> _Run:
    """Check the config and the targets (no I/O but the SQLite check), then claim ``out_dir``.

    Raises:
        ValueError: a bad config;
            [`UnsafeTargetError`][fencedlease_lab.harness.run.UnsafeTargetError] (a ``ValueError``)
            for a target holding data the check did not write, before anything is written.
    """
    if config.workers < 2:
        raise ValueError("workers must be at least 2 (a lease needs someone to take it over)")
    if config.duration_s <= 0:
        raise ValueError("duration_s must be positive")
    if not 0 <= config.stale_share < 1:
        raise ValueError(f"stale_share must be in [0, 1), got {config.stale_share}")
    if config.resource.startswith("memory") and config.resource_url:
        raise ValueError(
            f"--resource {config.resource} runs in a process of the run's own:"
            " --resource-url does not apply to it"
        )
    check_topology(
        config.topology,
        redis_url=config.redis_url,
        replica_acks=config.replica_acks,
        fencing=config.fencing,
    )
    if config.resource == "mixed" and config.resource_url:
        raise ValueError(
            "--resource mixed runs each kind where the check puts it: --resource-url needs"
            " one kind (--resource sqlite, redis, ...)"
        )
    seed = config.seed if config.seed is not None else secrets.randbelow(2**31)
    if config.schedule is not None and config.schedule.workers != config.workers:
        raise ValueError(
            f"the schedule is for {config.schedule.workers} workers, the run has {config.workers}"
        )
    out_dir = Path(config.out_dir)
    redis_resource = config.resource.startswith("redis")
    for url in (config.redis_url, config.resource_url if redis_resource else None):
        if url:
            check_redis_url(url)
    if config.resource.startswith("sqlite") and config.resource_url:
        check_sqlite_resource(config.resource_url)  # before anything is written
    parts_dir = claim_out_dir(out_dir)
    secret_urls = [url for url in (config.redis_url, config.resource_url) if url]
    return _Run(config, seed, out_dir, parts_dir, secret_urls)
