#!/usr/bin/env bash
# Durable ingestion on PostgreSQL beside SQLite, in the same minutes: one
# collector on a SQLite file, one on a PostgreSQL database, and three on one
# PostgreSQL database (each under a wrk of its own with a third of the
# connections, their rates summed, the worst p99 kept), the three again at half
# their rate, and analytics latency on a store of BENCH_PG_EVENTS events
# (default 10 million; 0 skips it). Run by
# `scripts/bench pg` inside scripts/with-postgres, which names the cluster in
# POSTERN_TEST_POSTGRES. BIN is the directory of a release postern.
# BENCH_PG_THREE_ONLY=1 runs only the three nodes at full rate (a quick A/B of
# two builds or settings); BENCH_NODE_ARGS are added to every PostgreSQL node's
# `postern serve` (e.g. `--group-wait-ms 2`).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${POSTERN_TEST_POSTGRES:?run this under scripts/with-postgres}"
BIN=${BIN:-target/release}
RUNS=${BENCH_RUNS:-3}
SECS=${BENCH_SECONDS:-10}
CONNS=64
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
# shellcheck source=bench/lib.sh
source bench/lib.sh

new_database() {  # NAME : prints the URL of a new, empty database
  psql -X -q "$POSTERN_TEST_POSTGRES/postgres" -c "CREATE DATABASE $1" >/dev/null
  echo "$POSTERN_TEST_POSTGRES/$1"
}

# one NAME DB [OPTION…] : a collector on DB, a warm-up, RUNS runs; prints "rps p99" medians.
one() {
  new_store "$2"
  start "$1" "$BIN/postern" serve --db "$2" --listen 127.0.0.1:0 --rate-limit-ingest 0 "${@:3}"
  load "$URL" >/dev/null
  : >"$WORK/$1.txt"
  for _ in $(seq "$RUNS"); do load "$URL" >>"$WORK/$1.txt"; done
  kill -TERM "$PID"; wait "$PID" 2>/dev/null || true
  echo "$(cut -d' ' -f1 "$WORK/$1.txt" | median) $(cut -d' ' -f3 "$WORK/$1.txt" | median) $(awk '{s += $5} END {print s}' "$WORK/$1.txt")"
}

THREE_ONLY=${BENCH_PG_THREE_ONLY:-0}
# Word-split on purpose: several options.
read -r -a NODE_ARGS <<<"${BENCH_NODE_ARGS:-}"
echo "# Postern on PostgreSQL, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(psql -X -At "$POSTERN_TEST_POSTGRES/postgres" -c 'SHOW server_version'), wrk -c$CONNS -d${SECS}s, 1 warm-up + $RUNS runs each${BENCH_NODE_ARGS:+, nodes with $BENCH_NODE_ARGS}"
if [ "$THREE_ONLY" != 1 ]; then
  read -r rps p99 non2xx < <(one lite "$WORK/lite.db")
  echo "SQLite, one node                rps=$rps p99_ms=$p99 non2xx=$non2xx"
  read -r rps p99 non2xx < <(one pg1 "$(new_database bench_one)" "${NODE_ARGS[@]}")
  echo "PostgreSQL, one node            rps=$rps p99_ms=$p99 non2xx=$non2xx"
fi

# Three nodes on one database, the connections split between them.
DB=$(new_database bench_three)
new_store "$DB"
URLS=()
NODES=()
for n in 1 2 3; do
  start "node$n" "$BIN/postern" serve --db "$DB" --listen 127.0.0.1:0 --rate-limit-ingest 0 "${NODE_ARGS[@]}"
  URLS+=("$URL"); NODES+=("$PID")
done
CONNS=21
three() {  # prints "summed_rps worst_p99 non2xx" of one run of three wrk at once
  local loads=()
  for n in 0 1 2; do
    load "${URLS[$n]}" >"$WORK/three.$n" &
    loads+=("$!")
  done
  wait "${loads[@]}"
  cat "$WORK"/three.? | awk '{r += $1; if ($3 > p) p = $3; e += $5} END {printf "%.0f %s %d\n", r, p, e}'
}
three >/dev/null
# Where the CPU goes while the three nodes run: the cluster's processes (the
# postmaster and its backends), the collectors, and the rest (wrk), in CPU ms
# per 1000 stored events, and how busy the machine's cores were (below 100 %,
# the nodes' writers wait on their commits rather than on the CPU).
pids_ticks() { for p in "$@"; do awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null; done | awk '{s += $1} END {print s + 0}'; }
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
postmaster=$(head -1 "$(psql -X -At "$POSTERN_TEST_POSTGRES/postgres" -c 'SHOW data_directory')/postmaster.pid")
cluster=("$postmaster" $(pgrep -P "$postmaster"))
stored0=$(psql -X -At "$DB" -c "SELECT count(*) FROM events")
read -r pg0 nodes0 busy0 all0 < <(echo "$(pids_ticks "${cluster[@]}") $(pids_ticks "${NODES[@]}") $(busy_ticks)")
: >"$WORK/three.txt"
for _ in $(seq "$RUNS"); do three >>"$WORK/three.txt"; done
read -r pg1 nodes1 busy1 all1 < <(echo "$(pids_ticks "${cluster[@]}") $(pids_ticks "${NODES[@]}") $(busy_ticks)")
echo "PostgreSQL, three nodes         rps=$(cut -d' ' -f1 "$WORK/three.txt" | median) p99_ms=$(cut -d' ' -f2 "$WORK/three.txt" | median) non2xx=$(awk '{s += $3} END {print s}' "$WORK/three.txt")   runs: $(cut -d' ' -f1 "$WORK/three.txt" | tr '\n' ' ')"
stored=$(psql -X -At "$DB" -c "SELECT count(*) FROM events")
dups=$(psql -X -At "$DB" -c "SELECT count(*) - count(DISTINCT client_event_id) FROM events")
echo "three nodes stored              $stored events, $dups stored twice"
awk -v n=$((stored - stored0)) -v hz="$(getconf CLK_TCK)" -v pg=$((pg1 - pg0)) -v nodes=$((nodes1 - nodes0)) -v busy=$((busy1 - busy0)) -v all=$((all1 - all0)) \
  'BEGIN {k = 1e6 / hz / n; printf "three nodes CPU per 1000 events postgres=%.0f ms collectors=%.0f ms other=%.0f ms (PostgreSQL alone on %d cores: at most %.0f events/s), cores busy %.0f %%\n", pg * k, nodes * k, (busy - pg - nodes) * k, '"$(nproc)"', '"$(nproc)"' * 1e6 / (pg * k), 100 * busy / all}'

stop_nodes() { for p in "${NODES[@]}"; do kill -TERM "$p"; wait "$p" 2>/dev/null || true; done; }
if [ "$THREE_ONLY" = 1 ]; then
  stop_nodes
  exit 0
fi

# Half the three nodes' rate: each connection waits between requests so that
# together they ask for rps/2 (as scripts/bench does for SQLite: a first paced
# run measures a request's own time, the reported ones wait that much less).
full=$(cut -d' ' -f1 "$WORK/three.txt" | median)
delay=$(awk -v r="$full" -v c=$((CONNS * 3)) 'BEGIN {printf "%d", 1000*c/(r/2)}')
paced() {
  local loads=()
  for n in 0 1 2; do load "${URLS[$n]}" "$delay" >"$WORK/half.$n" & loads+=("$!"); done
  wait "${loads[@]}"
  cat "$WORK"/half.? | awk '{r += $1; if ($3 > p) p = $3; e += $5} END {printf "%.0f %s %d\n", r, p, e}'
}
read -r h_rps _ < <(paced)
delay=$(awk -v r="$full" -v c=$((CONNS * 3)) -v d="$delay" -v h="$h_rps" 'BEGIN {w = 1000*c/(r/2) - (1000*c/h - d); printf "%d", (w > 0 ? w + 0.5 : 0)}')
: >"$WORK/half.txt"
for _ in $(seq "$RUNS"); do paced >>"$WORK/half.txt"; done
echo "three nodes at half rate        rps=$(cut -d' ' -f1 "$WORK/half.txt" | median) p99_ms=$(cut -d' ' -f2 "$WORK/half.txt" | median) non2xx=$(awk '{s += $3} END {print s}' "$WORK/half.txt") (asked $(( ${full%.*} / 2 )); each connection paced at ${delay} ms)"
stop_nodes
[ "${BENCH_PG_EVENTS:-10000000}" = 0 ] && exit 0

# Analytics on a large store: BENCH_PG_EVENTS (default 10 million) events over
# 90 days through the real write path, then each endpoint's latency.
EVENTS=${BENCH_PG_EVENTS:-10000000}
BIG=$(new_database bench_big)
echo "seeding $EVENTS events over 90 days (real write path)..." >&2
seed_start=$(date +%s)
eval "$("$BIN/seed" "$BIG" "$EVENTS" 90 | awk '{print toupper($1) "=" $2}')"
echo "seeded PostgreSQL store         $EVENTS events in $(( $(date +%s) - seed_start )) s, $(psql -X -At "$BIG" -c "SELECT pg_size_pretty(pg_database_size(current_database()))")"
start big "$BIN/postern" serve --db "$BIG" --listen 127.0.0.1:0 --rate-limit-ingest 0 --rate-limit-api 0
"$BIN/querylat" "$URL" "$KEY" "$SITE" 200 | sed 's/^QUERY /query (PostgreSQL) /'
kill -TERM "$PID"; wait "$PID" 2>/dev/null || true
