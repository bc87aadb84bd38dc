#!/usr/bin/env bash
# A/B of ingestion builds in the same minutes, which the shared machine's
# noise makes the only fair comparison:
#   bench/ab-ingest.sh RUNS SECONDS DIR...
# For each DIR (holding a release `postern`), in turn: a fresh store (or a
# copy of $AB_STORE, whose site id and key are in $AB_STORE.site / .key), one
# collector, a warm-up run, then RUNS wrk runs of SECONDS with bench/track.lua.
# One line per DIR: per run req/s, p99, non-2xx and CPU µs per request of
# each thread group (from /proc/PID/task/*/stat), then peak RSS, duplicates
# acknowledged and jobs per commit. Set AB_ROUNDS to alternate several times.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: bench/ab-ingest.sh RUNS SECONDS DIR..." >&2; exit 2; }
RUNS=$1 SECS=$2
shift 2
LUA="$(cd "$(dirname "$0")" && pwd)/track.lua"

# cpu_by_thread PID : "name ticks" per thread name (numbered threads summed).
cpu_by_thread() {
  for t in /proc/"$1"/task/*; do
    echo "$(tr ' ' _ <"$t/comm") $(awk '{print $14 + $15}' "$t/stat")"
  done | awk '{n = $1; sub(/[-_]?[0-9]+$/, "", n); a[n] += $2} END {for (k in a) print k, a[k]}' | sort
}

one() {
  local bin=$1 w key site pid url res rps line=""
  w=$(mktemp -d)
  if [ -n "${AB_STORE:-}" ]; then
    cp "$AB_STORE" "$w/db"
    site=$(cat "$AB_STORE.site")
  else
    key=$("$bin/postern" admin create-key --db "$w/db" --account bench)
    site=$("$bin/postern" admin create-site --db "$w/db" --account bench --name Bench \
      --domain news.example.com --timezone Europe/Paris)
    : "$key"
  fi
  "$bin/postern" serve --db "$w/db" --listen 127.0.0.1:0 --rate-limit-ingest 0 >"$w/out" 2>"$w/err" &
  pid=$!
  for _ in $(seq 300); do
    url=$(grep -o 'http://[0-9.:]*' "$w/out" | head -1 || true)
    [ -n "$url" ] && break
    sleep 0.1
  done
  SITE_ID=$site wrk -t2 -c64 -d"${SECS}s" -s "$LUA" "$url" >/dev/null
  for _ in $(seq "$RUNS"); do
    cpu_by_thread $pid >"$w/c0"
    res=$(SITE_ID=$site wrk -t2 -c64 -d"${SECS}s" -s "$LUA" "$url" | grep RESULT)
    cpu_by_thread $pid >"$w/c1"
    rps=$(sed -E 's/.*rps=([0-9]+).*/\1/' <<<"$res")
    line="$line | $rps p99=$(sed -E 's/.*p99_ms=([0-9.]+).*/\1/' <<<"$res") non2xx=$(sed -E 's/.*non2xx=([0-9]+).*/\1/' <<<"$res")"
    # Clock ticks are 10 ms: µs per request = ticks × 10,000 / requests.
    line="$line $(join "$w/c0" "$w/c1" | awk -v n=$((rps * SECS)) '$3 > $2 {printf "%s=%.1f ", $1, ($3 - $2) * 10000 / n}')"
  done
  local rss metrics
  rss=$(awk '/VmHWM/ {print int($2 / 1024)}' /proc/$pid/status)
  metrics=$(curl -s "$url/metrics")
  kill -TERM $pid
  wait $pid || true
  echo "$bin$line | rss=${rss}MB dups=$(awk '/^postern_events_duplicate_total/ {print $2}' <<<"$metrics")" \
    "jobs/commit=$(awk '/^postern_commit_jobs_total/ {j = $2} /^postern_commits_total/ {c = $2} END {printf "%.1f", j / c}' <<<"$metrics")"
  rm -rf "$w"
}

for _ in $(seq "${AB_ROUNDS:-1}"); do
  for dir in "$@"; do
    one "$dir"
  done
done
