#!/usr/bin/env bash
# Export benchmark: peak memory of the collector while it streams exports of a
# busy site. Seeds 90 days of raw events through the real write path (`seed`)
# and two years of hourly rollups before that (`exportseed`), then downloads
# CSV, JSON, PDF and ZIP exports of growing periods and prints the collector's
# peak RSS (VmHWM) after each: flat peaks mean the exports stream.
# Run by scripts/bench (which builds the release binaries), or alone:
#   cargo build --release --locked -p postern -p postern-bench && bench/export.sh
# Environment: EXPORT_EVENTS (raw events over 90 days, default 1000000).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release
EVENTS=${EXPORT_EVENTS:-1000000}
WORK=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

echo "seeding $EVENTS events over 90 days, then rollups back to 730 days..." >&2
eval "$($BIN/seed "$WORK/export.db" "$EVENTS" 90 2>/dev/null | awk '{print toupper($1) "=" $2}')"
$BIN/exportseed "$WORK/export.db" "$SITE" 730 150 | sed 's/^/exportseed /' >&2
$BIN/postern serve --db "$WORK/export.db" --listen 127.0.0.1:0 --rate-limit-api 0 >"$WORK/out" 2>"$WORK/err" &
PID=$!
for _ in $(seq 200); do URL=$(grep -o 'http://[0-9.:]*' "$WORK/out" | head -1 || true); [ -n "$URL" ] && break; sleep 0.1; done
[ -n "$URL" ] || { cat "$WORK/err" >&2; exit 1; }
rss_mb() { awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$PID/status"; }

curl -sf -H "Authorization: Bearer $KEY" "$URL/v1/analytics/sites/$SITE/dashboard?days=7" >/dev/null
echo "export benchmark: $(du -m "$WORK/export.db" | cut -f1) MB store, $EVENTS raw events (90 days), rollups for 730 days"
echo "collector peak RSS before any export   $(rss_mb) MB"
today=$(TZ=Europe/Paris date +%F)
# export FORMAT DAYS : downloads one export, prints size, rows, time and the peak RSS after it.
export_one() {
  local start; start=$(TZ=Europe/Paris date -d "$today - $(( $2 - 1 )) days" +%F)
  local t0; t0=$(date +%s.%N)
  curl -sf -H "Authorization: Bearer $KEY" -o "$WORK/file" "$URL/v1/sites/$SITE/export?format=$1&start=$start&end=$today"
  local secs; secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  local rows=""
  case $1 in
    csv) rows="$(( $(wc -l <"$WORK/file") - 1 )) rows, " ;;
    zip) rows="$(python3 -c 'import json, sys, zipfile; m = json.loads(zipfile.ZipFile(sys.argv[1]).read("manifest.json")); print(" ".join("%s=%s" % (f["name"], f["rows"]) for f in m["files"]), end=", ")' "$WORK/file")" ;;
  esac
  printf '%-4s %3s days  %6s MB  %s%5ss  peak RSS %s MB\n' "$1" "$2" "$(awk -v b="$(stat -c %s "$WORK/file")" 'BEGIN {printf "%.1f", b / 1048576}')" "$rows" "$secs" "$(rss_mb)"
}
export_one csv 30
export_one csv 730
export_one json 730
export_one pdf 730
export_one zip 30
export_one zip 730
