#!/usr/bin/env bash
# Make PostgreSQL's server binaries (initdb, postgres) available for the live database tests.
# Called by .ci/run. Idempotent and quiet: does nothing when initdb is already there. The tests start
# their own throwaway server (lab/src/fencedlease_lab/servers/postgres.py), so the packaged cluster is not
# used; it is stopped so that it holds no port and no memory.
set -euo pipefail

have_initdb() {
  command -v initdb >/dev/null 2>&1 && return 0
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

if have_initdb; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null

# Debian's package may have started its default cluster; ours does not need it.
if command -v pg_ctlcluster >/dev/null 2>&1; then
  for conf in /etc/postgresql/*/main; do
    [ -d "$conf" ] || continue
    version="$(basename "$(dirname "$conf")")"
    $SUDO pg_ctlcluster "$version" main stop >/dev/null 2>&1 || true
  done
fi

have_initdb || { echo "postgres.sh: initdb still missing after apt-get install postgresql" >&2; exit 1; }
