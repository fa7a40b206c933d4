# Shared by river-bloat.sh and river-history.sh (sourced, not run).

# build_river RIVER_GIT_DIR WORKDIR [PATCH]: builds River's CLI from a
# checkout of riverqueue/river into WORKDIR/river, once; PATCH, if given,
# is a function run in the cloned source before the build.
build_river() {
  local git=$1 w=$2 patch=${3:-}
  mkdir -p "$w"
  [ -x "$w/river" ] && return 0
  rm -rf "$w/src"; git clone -q "$git" "$w/src" || { echo "cannot clone $git"; return 1; }
  # riverdrivertest needs a module the proxy refuses; the CLI does not need it.
  sed -i '/riverdrivertest/d' "$w/src/go.work"
  if [ -n "$patch" ]; then "$patch" "$w/src" || return 1; fi
  (cd "$w/src/cmd/river" && go build -o "$w/river" .) || { echo "river build failed"; return 1; }
}

# start_cluster PREFIX [EXTRA_CONF]: starts a private PostgreSQL cluster
# (binaries from /usr/lib/postgresql/*/bin; as root, run as postgres) with
# the settings cmd/bench gives its own, durability on, and stops and
# removes it when the script exits. Sets PGPORT and base
# (postgres://postgres@127.0.0.1:PORT, no database).
start_cluster() {
  local prefix=$1 extra=${2:-}
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$PGBIN" ] || { echo "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)"; return 1; }
  PGDIR=$(mktemp -d "/tmp/$prefix-pg.XXXXXX"); chmod 755 "$PGDIR"
  PGPORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  as_pg "$PGBIN/initdb -D $PGDIR/data -A trust -U postgres >$PGDIR/initdb.log 2>&1" || { echo "initdb failed"; return 1; }
  printf 'shared_buffers = 1GB\nmax_wal_size = 8GB\ncheckpoint_timeout = 15min\n%s\n' "$extra" >> "$PGDIR/data/postgresql.conf"
  as_pg "$PGBIN/pg_ctl -D $PGDIR/data -o '-p $PGPORT -k $PGDIR -c listen_addresses=127.0.0.1' -l $PGDIR/log -w start >/dev/null" || { echo "pg start failed"; return 1; }
  trap 'as_pg "$PGBIN/pg_ctl -D $PGDIR/data -m immediate stop >/dev/null 2>&1"; rm -rf "$PGDIR"' EXIT
  base="postgres://postgres@127.0.0.1:$PGPORT"
}

as_pg() { if [ "$(id -u)" = 0 ]; then chown -R postgres "$PGDIR"; su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
