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

. "$(dirname "$0")/river-lib.sh"
W=/tmp/river-history
# The bench's resetJobsTable call goes (see above).
unreset() {
  local f="$1/cmd/river/riverbench/river_bench.go"
  grep -q 'if err := b.resetJobsTable(ctx); err != nil {' "$f" || { echo "river_bench.go no longer calls resetJobsTable as expected"; return 1; }
  sed -i 's/if err := b.resetJobsTable(ctx); err != nil {/if err := error(nil); err != nil { _ = b.resetJobsTable/' "$f"
}
build_river "$RIVER_GIT" "$W" unreset || exit 1
start_cluster river-history || exit 1
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
