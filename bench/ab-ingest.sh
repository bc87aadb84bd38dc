#!/usr/bin/env bash
# A/B of ingestion builds in the same minutes, which the shared machine's
# noise makes the only fair comparison:
#   bench/ab-ingest.sh RUNS SECONDS DIR...
# For each DIR (holding a release `postern`), in turn: a fresh store (or a
# copy of $AB_STORE, whose site id is in $AB_STORE.site), one collector, a
# warm-up run, then RUNS wrk runs of SECONDS with bench/track.lua. One line per
# DIR: per run req/s, p99, non-2xx and CPU µs per request of each thread
# group, then peak RSS, duplicates acknowledged and jobs per commit. Set
# AB_ROUNDS to alternate several times.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: bench/ab-ingest.sh RUNS SECONDS DIR..." >&2; exit 2; }
RUNS=$1 SECS=$2
shift 2
DIRS=()
for d in "$@"; do DIRS+=("$(cd "$d" && pwd)"); done
cd "$(dirname "$0")/.."
CONNS=64
PIDS=()
trap 'for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done' EXIT
# shellcheck source=bench/lib.sh
source bench/lib.sh

one() {
  BIN=$1
  WORK=$(mktemp -d)
  if [ -n "${AB_STORE:-}" ]; then
    cp "$AB_STORE" "$WORK/db"
    SITE=$(cat "$AB_STORE.site")
  else
    new_store "$WORK/db"
  fi
  start collector "$BIN/postern" serve --db "$WORK/db" --listen 127.0.0.1:0 --rate-limit-ingest 0
  load "$URL" >/dev/null
  local line="" rps p99 non2xx
  for _ in $(seq "$RUNS"); do
    thread_cpu "$PID" >"$WORK/cpu0"
    read -r rps _ p99 _ non2xx < <(load "$URL")
    thread_cpu "$PID" >"$WORK/cpu1"
    line="$line | $rps p99=$p99 non2xx=$non2xx $(cpu_split "$WORK/cpu0" "$WORK/cpu1" "$(awk -v r="$rps" -v s="$SECS" 'BEGIN {printf "%d", r * s}')")"
  done
  local metrics
  metrics=$(curl -s "$URL/metrics")
  echo "$BIN$line | rss=$(( $(rss_kb "$PID") / 1024 ))MB dups=$(awk '/^postern_events_duplicate_total/ {print $2}' <<<"$metrics")" \
    "jobs/commit=$(awk '/^postern_commit_jobs_total/ {j = $2} /^postern_commits_total/ {c = $2} END {printf "%.1f", j / c}' <<<"$metrics")"
  kill -TERM "$PID"
  wait "$PID" || true
  rm -rf "$WORK"
}

for _ in $(seq "${AB_ROUNDS:-1}"); do
  for dir in "${DIRS[@]}"; do
    one "$dir"
  done
done
