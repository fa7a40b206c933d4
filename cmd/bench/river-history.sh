#!/usr/bin/env bash
# River's burn-down over a finished history against an empty table, on ONE
# PostgreSQL cluster: the River side of `cmd/bench -scenario history`.
#
#   cmd/bench/river-history.sh RIVER_GIT_DIR [HISTORY] [N] [ROUNDS]
#
#   RIVER_GIT_DIR  a git directory or checkout of riverqueue/river, e.g.
#                  /work/.mirror/riverqueue+river/repo
#   HISTORY        completed jobs seeded first, default 1000000 (the full
#                  size is 10000000)
#   N              jobs of each burn-down (`river bench -n N`), default 100000
#   ROUNDS         alternated pairs (empty, over the history), default 3
#
# Run it from the root of the Cairn checkout on a quiet machine. It starts a
# private cluster (PostgreSQL from /usr/lib/postgresql/*/bin) with the
# settings cmd/bench gives its own, durability on.
#
# River's `river bench` truncates river_job (and VACUUM FULLs it) before it
# starts. This script builds River's CLI with that one call removed (a sed
# on cmd/river/riverbench/river_bench.go), so the bench runs over the
# seeded rows; its rate counts only its own jobs (its client's completion
# events). The history is written with SQL like Cairn's: completed
# `benchmark` jobs of the default queue, finalized over the last 23 hours
# (inside River's default 24-hour retention of completed jobs, so River's
# cleaner keeps them, as it would keep a day of a busy queue), then VACUUM
# ANALYZE. Each burn-down follows a CHECKPOINT; the empty side is a fresh
# database each round, the history side keeps its database (each round's
# jobs join the history of the next). It prints every round, the medians
# and the median of the rounds' ratios.
set -u
RIVER_GIT=${1:?usage: river-history.sh RIVER_GIT_DIR [HISTORY] [N] [ROUNDS]}
HISTORY=${2:-1000000}; N=${3:-100000}; ROUNDS=${4:-3}
CHUNK=500000

W=/tmp/river-history; mkdir -p "$W"
if [ ! -x "$W/river" ]; then
  rm -rf "$W/src"; git clone -q "$RIVER_GIT" "$W/src" || { echo "cannot clone $RIVER_GIT"; exit 1; }
  # riverdrivertest needs a module the proxy refuses; the CLI does not need it.
  sed -i '/riverdrivertest/d' "$W/src/go.work"
  f="$W/src/cmd/river/riverbench/river_bench.go"
  grep -q 'if err := b.resetJobsTable(ctx); err != nil {' "$f" || { echo "river_bench.go no longer calls resetJobsTable as expected"; exit 1; }
  sed -i 's/if err := b.resetJobsTable(ctx); err != nil {/if err := error(nil); err != nil { _ = b.resetJobsTable/' "$f"
  (cd "$W/src/cmd/river" && go build -o "$W/river" .) || { echo "river build failed"; exit 1; }
fi

PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$PGBIN" ] || { echo "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)"; exit 1; }
PGDIR=$(mktemp -d /tmp/river-history-pg.XXXXXX); chmod 755 "$PGDIR"
PGPORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
as_pg() { if [ "$(id -u)" = 0 ]; then chown -R postgres "$PGDIR"; su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
as_pg "$PGBIN/initdb -D $PGDIR/data -A trust -U postgres >$PGDIR/initdb.log 2>&1" || { echo "initdb failed"; exit 1; }
cat >> "$PGDIR/data/postgresql.conf" <<CONF
shared_buffers = 1GB
max_wal_size = 8GB
checkpoint_timeout = 15min
CONF
as_pg "$PGBIN/pg_ctl -D $PGDIR/data -o '-p $PGPORT -k $PGDIR -c listen_addresses=127.0.0.1' -l $PGDIR/log -w start >/dev/null" || { echo "pg start failed"; exit 1; }
trap 'as_pg "$PGBIN/pg_ctl -D $PGDIR/data -m immediate stop >/dev/null 2>&1"; rm -rf "$PGDIR"' EXIT
base="postgres://postgres@127.0.0.1:$PGPORT"
export PGOPTIONS="-c client_min_messages=warning"
admin() { psql "$base/postgres?sslmode=disable" -XAtq -c "$1"; }
fresh() { admin "drop database if exists $1 with (force)" && admin "create database $1" &&
  "$W/river" migrate-up --database-url "$base/$1?sslmode=disable" >/dev/null; }
bench() { # database, log file: prints River's overall jobs/s
  admin checkpoint
  "$W/river" bench --database-url "$base/$1?sslmode=disable" -n "$N" > "$2" 2>&1
  grep -oE 'overall job/sec \[ *[0-9.]+' "$2" | tail -1 | grep -oE '[0-9.]+$'
}

fresh river_history || { echo "river migrate failed"; exit 1; }
echo "== seeding $HISTORY completed jobs"
start=$(date +%s)
for ((from = 0; from < HISTORY; from += CHUNK)); do
  n=$((HISTORY - from < CHUNK ? HISTORY - from : CHUNK))
  psql "$base/river_history?sslmode=disable" -XAtq -c "
    INSERT INTO river_job (state, attempt, max_attempts, attempted_at, attempted_by, created_at, scheduled_at, finalized_at,
                           kind, args, queue, priority, metadata, tags)
    SELECT 'completed', 1, 25, t, '{bench}', t, t, t, 'benchmark', '{\"job_num\": 1}', 'default', 1, '{}', '{}'
    FROM (SELECT now() - interval '23 hours' * (1 - g::float8 / $HISTORY) AS t
          FROM generate_series($from + 1, $from + $n) g) x" || exit 1
  echo "  seeded $((from + n)) of $HISTORY ($(( $(date +%s) - start )) s)"
done
psql "$base/river_history?sslmode=disable" -XAtq -c "VACUUM ANALYZE river_job" || exit 1
echo "  river_job $(psql "$base/river_history?sslmode=disable" -XAtq -c "select pg_size_pretty(pg_total_relation_size('river_job'))") with its indexes"

e=(); h=(); r=()
for i in $(seq 1 "$ROUNDS"); do
  fresh river_empty || exit 1
  ev=$(bench river_empty "$W/empty-$i.log")
  hv=$(bench river_history "$W/history-$i.log")
  ratio=$(awk -v a="${hv:-0}" -v b="${ev:-0}" 'BEGIN{printf "%.2f", (b > 0 ? a / b : 0)}')
  echo "round $i: river empty ${ev:-?} jobs/s   over the history ${hv:-?} jobs/s   ratio $ratio"
  e+=("${ev:-0}"); h+=("${hv:-0}"); r+=("$ratio")
done
# The patched bench kept the history: every seeded job and every round's.
kept=$(psql "$base/river_history?sslmode=disable" -XAtq -c "select count(*) from river_job where state = 'completed'")
[ "$kept" = "$((HISTORY + ROUNDS * N))" ] || echo "WARNING: river_job holds $kept completed jobs, expected $((HISTORY + ROUNDS * N)): the history was not kept"
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
echo "median: empty $(med "${e[@]}") jobs/s, over $HISTORY completed $(med "${h[@]}") jobs/s, ratio $(med "${r[@]}")"
echo "logs: $W"
