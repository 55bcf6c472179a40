"""The colours of the picture: a lease bar's by its outcome, a fault's by its kind, a counter
rollback's band."""

from __future__ import annotations

from typing import Final

OUTCOME_COLORS: Final = {
    "ok": "#43a047",
    "lease-lost": "#e53935",
    "stale": "#fb8c00",
    "unknown": "#9e9e9e",
}
FAULT_COLORS: Final = {
    "latency": "#ffd54f",
    "pause-holder": "#7e57c2",
    "partition": "#29b6f6",
    "client-kill": "#8d6e63",
    "script-flush": "#8d6e63",
    "timeout": "#26a69a",
    "reset-peer": "#ec407a",
    "redis-pause": "#5c6bc0",
    "redis-restart-aof": "#546e7a",
    "redis-restart-nopersist": "#d32f2f",
    "clock": "#9ccc65",
    "kill-holder": "#212121",
    "drop-replies": "#80deea",
    "drop-requests": "#4dd0e1",
    "kernel-drop": "#ffab91",
    "kernel-reject": "#ff7043",
    "evict": "#ab47bc",
    "slow-cut": "#0288d1",
    "replica-lag": "#fbc02d",
    "sentinel-failover": "#00897b",
    "sentinel-kill-primary": "#4e342e",
    "lag-failover": "#c62828",
    "deposed-primary": "#6a1b9a",
    "cluster-failover": "#00695c",
    "cluster-kill-master": "#3e2723",
    "slow-grant": "#00838f",
    "slow-handoff": "#5e35b1",
    "resource-link": "#a1887f",
}

#: The colour of a counter rollback's band.
ROLLBACK_COLOR: Final = "#e57373"
