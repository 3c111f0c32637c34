#!/usr/bin/env bash
# The per-task cost table of docs/benchmarks.md: Norn's submit, claim and completion (pgcost, twice:
# as `norn bench` runs them, then in phases of their own) and River's benchmark (pgcost -observe),
# one after the other on one throwaway PostgreSQL.
#
# Usage, from the project's root:   internal/pgcost/costtable.sh [TASKS] [RIVERBENCH]
#   (defaults: 200000 tasks; RIVERBENCH: the directory of River's benchmark program,
#   ../shared/bench/riverbench, the one the river-vs-norn harness runs)
#   PGCOST_ARGS adds flags to Norn's pgcost; WALTYPES=1 also prints the WAL records by type,
#   STMTS=1 the costliest statements.
#
# The cluster runs at default settings but for pg_stat_statements (preloaded) and wal_keep_size
# (so that pg_walinspect can read every measured range). It prints nproc and the load average
# before and after each system: the CPU figures are only worth comparing from a quiet machine.
set -euo pipefail
N=${1:-200000}; RB=${2:-../shared/bench/riverbench}
TMP=$(mktemp -d /tmp/pgcost.XXXXXX); chmod 755 "$TMP"
PG_STOP=""
cleanup() { [ -n "$PG_STOP" ] && eval "$PG_STOP" >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT

[ -d internal/pgcost ] || { echo "run from the project's root (no internal/pgcost here)"; exit 2; }
go build -o "$TMP/pgcost" ./internal/pgcost
(cd "$RB" && go build -o "$TMP/riverbench" .)

bin=$(dirname "$(readlink -f "$(command -v initdb 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1)")")
[ -x "$bin/initdb" ] || { echo "no PostgreSQL server binaries (apt-get install -y postgresql)"; exit 2; }
as=()
if [ "$(id -u)" = 0 ]; then
  id -u nornbench >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin nornbench
  chown nornbench "$TMP"; as=(runuser -u nornbench --)
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${as[@]}" "$bin/initdb" -D "$TMP/pg" -U postgres --auth=trust >"$TMP/initdb.log" 2>&1
"${as[@]}" "$bin/pg_ctl" -D "$TMP/pg" -o "-p $port -k $TMP -c listen_addresses=127.0.0.1 -c shared_preload_libraries=pg_stat_statements -c wal_keep_size=8GB" \
  -l "$TMP/pg.log" -w start >/dev/null
PG_STOP="${as[*]} $bin/pg_ctl -D $TMP/pg stop -m fast"
pm=$(head -1 "$TMP/pg/postmaster.pid")
base="postgres://postgres@127.0.0.1:$port"
"$bin/psql" "$base/postgres?sslmode=disable" -qc 'create database norn_cost' -c 'create database river_cost' >/dev/null
RURL="$base/river_cost?sslmode=disable"; NURL="$base/norn_cost?sslmode=disable"
# River's schema first, so that its migration is not in the measured run.
"$TMP/riverbench" -database-url "$RURL" -n 1000 >/dev/null

# Each system starts from a vacuumed database and a checkpoint, so that neither pays for the other.
settle() { "$bin/psql" "$1" -qc 'VACUUM' -c 'CHECKPOINT'; }
load() { echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"; }
settle "$RURL"; settle "$NURL"
load
# Norn as the harness runs it: 4 submitters of 1,000, then 2 workers claiming 1,000 and completing
# each claim at once (-interleave); then again with all claims first and all completions after,
# the check on the first run's split of the WAL by transaction.
# shellcheck disable=SC2086
"$TMP/pgcost" -url "$NURL" -pm "$pm" -n "$N" -submitters 4 -batch 1000 -workers 2 -claim 1000 -interleave ${PGCOST_ARGS:-}
load
settle "$NURL"
load
# shellcheck disable=SC2086
"$TMP/pgcost" -url "$NURL" -pm "$pm" -n "$N" -submitters 4 -batch 1000 -workers 2 -claim 1000 ${PGCOST_ARGS:-}
load
settle "$NURL"; settle "$RURL"
load
"$TMP/pgcost" -observe -system river -url "$RURL" -pm "$pm" -n "$N" -- "$TMP/riverbench" -database-url "$RURL" -n "$N"
load
