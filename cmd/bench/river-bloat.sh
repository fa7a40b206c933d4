#!/usr/bin/env bash
# Bloat under a held snapshot, River beside Cairn, on ONE PostgreSQL cluster.
#
#   cmd/bench/river-bloat.sh RIVER_GIT_DIR [DURATION_S] [RECOVERY_S] [-- extra cmd/bench flags]
#
#   RIVER_GIT_DIR  a git directory or checkout of riverqueue/river, e.g.
#                  /work/.mirror/riverqueue+river/repo (built once into /tmp/river-bloat)
#   DURATION_S     the timeline, default 300 (5 minutes): a separate psql
#                  session holds a REPEATABLE READ snapshot (BEGIN ISOLATION
#                  LEVEL REPEATABLE READ; SELECT 1 FROM <jobs table> LIMIT 1;
#                  pg_sleep; COMMIT) from 1/5 to 4/5 of it
#   RECOVERY_S     how long the load goes on after the timeline to watch the
#                  recovery, default 90
#   CAIRN_RATES    (environment) Cairn's -bloat-rate values to run, default
#                  "0 -1": half capacity (the scenario's own mode), then full
#                  speed like River's bench
#
# Run it from the root of the Cairn checkout on a quiet machine. Without
# DATABASE_URL it starts a private cluster (PostgreSQL from
# /usr/lib/postgresql/*/bin, the settings cmd/bench gives its own, durability
# on); with it, it uses that server (it creates the database "river_bloat").
#
# River's `river bench` has no fixed-rate mode (only --duration and
# --num-total-jobs): it keeps at least 75,000 jobs available and works them
# as fast as it can. So River runs at FULL SPEED here, and what compares is
# each system's throughput while held ÷ before. Per fifth of the timeline the
# script prints River's jobs/s (from its own 2-second lines), n_dead_tup of
# river_job and pgstattuple of its fetch index
# (river_job_prioritized_fetching_index); then the recovery after the release
# (seconds until a 6-second window of jobs/s is back to ≥ 95% of before, and
# until n_dead_tup is back down to its peak before the snapshot). Then it runs
# `cmd/bench -scenario bloat -bloat-duration DURATION_S` against the same
# server, once per CAIRN_RATES value, and prints Cairn's table rows.
set -u
RIVER_GIT=${1:?usage: river-bloat.sh RIVER_GIT_DIR [DURATION_S] [RECOVERY_S] [-- cmd/bench flags]}; shift
D=300; REC=90
[ $# -gt 0 ] && [ "$1" != "--" ] && { D=$1; shift; }
[ $# -gt 0 ] && [ "$1" != "--" ] && { REC=$1; shift; }
[ "${1:-}" = "--" ] && shift
EXTRA=("$@")
CAIRN_RATES=${CAIRN_RATES:-"0 -1"}
P=$((D / 5)); HOLD=$((3 * P))
[ "$P" -ge 2 ] || { echo "DURATION_S must be at least 10"; exit 1; }

. "$(dirname "$0")/river-lib.sh"
W=/tmp/river-bloat
build_river "$RIVER_GIT" "$W" || exit 1
go build -o "$W/cairn-bench" ./cmd/bench || { echo "cairn bench build failed"; exit 1; }

if [ -n "${DATABASE_URL:-}" ]; then
  admin=$DATABASE_URL
  base=${DATABASE_URL%/*}; q=""; case "$DATABASE_URL" in *\?*) q="?${DATABASE_URL#*\?}";; esac
  rurl="$base/river_bloat$q"
else
  start_cluster river-bloat "shared_preload_libraries = 'pg_stat_statements'
max_connections = 400" || exit 1
  admin="postgres://postgres@127.0.0.1:$PGPORT/postgres?sslmode=disable"
  rurl="postgres://postgres@127.0.0.1:$PGPORT/river_bloat?sslmode=disable"
fi
sql() { psql "$rurl" -XAtq -c "$1"; }
psql "$admin" -XAtq -c "drop database if exists river_bloat with (force)" -c "create database river_bloat" || exit 1
"$W/river" migrate-up --database-url "$rurl" >/dev/null || { echo "river migrate failed"; exit 1; }
stattuple=1; sql "create extension if not exists pgstattuple" >/dev/null 2>&1 || stattuple=0

echo "== River: river bench --duration $((D + REC))s (full speed), snapshot held from ${P}s to $((4 * P))s"
rm -f "$W/river.log" "$W/dead.tsv" "$W/periods.txt"
# Each line of River's bench gets the epoch time it was printed at.
("$W/river" bench --database-url "$rurl" --duration "$((D + REC))s" 2>&1 |
  while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done > "$W/river.log") &
bench_pid=$!
# The timeline starts at River's first throughput line (after its initial
# insert of 75,000 jobs).
until grep -q 'job/sec' "$W/river.log" 2>/dev/null; do
  kill -0 "$bench_pid" 2>/dev/null || { echo "river bench ended early:"; tail "$W/river.log"; exit 1; }
  sleep 0.2
done
t0=$(date +%s.%N)
(sleep "$P"; { echo "BEGIN ISOLATION LEVEL REPEATABLE READ;"; echo "SELECT 1 FROM river_job LIMIT 1;";
  echo "SELECT pg_sleep($HOLD);"; echo "COMMIT;"; } | psql "$rurl" -Xq >/dev/null) &
k=1
while kill -0 "$bench_pid" 2>/dev/null; do
  now=$(date +%s.%N); el=$(awk -v a="$now" -v b="$t0" 'BEGIN{printf "%d", a-b}')
  echo "$now $(sql "select n_dead_tup, autovacuum_count from pg_stat_user_tables where relname = 'river_job'" | tr '|' ' ')" >> "$W/dead.tsv"
  if [ "$k" -le 5 ] && [ "$el" -ge $((k * P)) ]; then
    if [ "$stattuple" = 1 ]; then
      ix=$(sql "select pg_size_pretty(table_len) || ', ' || tuple_count || ' entries (' || dead_tuple_count || ' marked dead)' from pgstattuple('river_job_prioritized_fetching_index')")
    else
      ix=$(sql "select pg_size_pretty(pg_relation_size('river_job_prioritized_fetching_index'))")
    fi
    xmin=$(sql "select coalesce(max(age(backend_xmin)), 0) from pg_stat_activity where datname = current_database()")
    dead=$(tail -1 "$W/dead.tsv" | awk '{print $2 " dead tuples, " $3 " autovacuums"}')
    echo "$k $now $dead; fetch index $ix; xmin age $xmin" >> "$W/periods.txt"
    echo "  period $k/5 done: river_job $dead; fetch index $ix; xmin age $xmin"
    k=$((k + 1))
  fi
  sleep 1
done
wait "$bench_pid"

# Per period: River's jobs/s from its 2-second lines ("jobs worked [ N ]").
awk -v t0="$t0" -v P="$P" -v rel="$((4 * P))" -v pre="$P" '
  FNR == NR { if ($0 ~ /jobs worked \[/ && $0 !~ /total jobs/) { match($0, /jobs worked \[ *[0-9]+/); s = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", s);
                t = $1 - t0; n++; T[n] = t; J[n] = s + 0; if (t > 0 && t <= 5 * P) { k = int((t - 0.001) / P) + 1; per[k] += s } } next }
  { D[++m] = $1 - t0; DD[m] = $2 }
  END {
    for (k = 1; k <= 5; k++) printf "River period %d/5: %.0f jobs/s\n", k, per[k] / P
    before = per[1] / P; held = (per[2] + per[3] + per[4]) / (3 * P)
    printf "River throughput while held / before: %.2f (%.0f of %.0f jobs/s)\n", (before > 0 ? held / before : 0), held, before
    peak = 0; for (i = 1; i <= m; i++) if (D[i] <= pre && DD[i] > peak) peak = DD[i]
    ra = -1; for (i = 4; i <= n; i++) if (T[i] >= rel && ra < 0 && (J[i] + J[i-1] + J[i-2]) / 6 >= 0.95 * before) ra = T[i] - rel
    da = -1; for (i = 1; i <= m; i++) if (D[i] >= rel && da < 0 && DD[i] <= peak) da = D[i] - rel
    printf "River recovery after the release: throughput >= 95%% of before after %s; n_dead_tup <= %d (peak before) after %s\n",
      (ra < 0 ? "not within the run" : sprintf("%.0fs", ra)), peak, (da < 0 ? "not within the run" : sprintf("%.0fs", da))
  }' "$W/river.log" "$W/dead.tsv" | tee "$W/river-summary.txt"
psql "$admin" -XAtq -c "drop database if exists river_bloat with (force)" >/dev/null

for rate in $CAIRN_RATES; do
  echo "== Cairn: cmd/bench -scenario bloat -bloat-duration ${D}s -bloat-recovery ${REC}s -bloat-rate $rate ${EXTRA[*]}"
  DATABASE_URL="$admin" "$W/cairn-bench" -scenario bloat -bloat-duration "${D}s" -bloat-recovery "${REC}s" -bloat-rate "$rate" "${EXTRA[@]}" \
    2>"$W/cairn-$rate.err" | tee "$W/cairn-$rate.log" | grep -E '^(bloat|SCENARIO)'
done
echo "logs: $W"
