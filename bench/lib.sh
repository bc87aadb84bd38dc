# Shell functions shared by scripts/bench and bench/ab-ingest.sh; sourced from
# the repository's root. The caller sets WORK (a scratch directory), PIDS (an
# array), BIN (the directory of the binaries), SITE (for `load`), SECS and CONNS.

# start NAME CMD... : runs a server that prints "listening on http://ADDR", sets URL and PID.
start() {
  local name=$1; shift
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PID=$!; PIDS+=("$PID")
  for _ in $(seq 200); do
    URL=$(grep -o 'http://[0-9.:]*' "$WORK/$name.out" | head -1 || true)
    [ -n "$URL" ] && return 0
    sleep 0.1
  done
  echo "$name did not start:" >&2; cat "$WORK/$name.err" >&2; exit 1
}

# load URL [DELAY_MS] : one wrk run, prints "rps p50 p99 errors non2xx".
load() {
  local out
  out=$(SITE_ID=$SITE DELAY_MS=${2:-0} wrk -t2 -c$CONNS -d${SECS}s -s bench/track.lua "$1" | grep '^RESULT')
  echo "$out" | sed -E 's/.*rps=([0-9.]+) p50_ms=([0-9.]+) p99_ms=([0-9.]+) errors=([0-9]+) non2xx=([0-9]+).*/\1 \2 \3 \4 \5/'
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
percent() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f%%", 100 * a / b}'; }  # A B : A as a percentage of B
rss_kb() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }

new_store() {  # DB : creates a key and a site, sets SITE and KEY
  KEY=$($BIN/postern admin create-key --db "$1" --account bench)
  SITE=$($BIN/postern admin create-site --db "$1" --account bench --name Bench --domain news.example.com --timezone Europe/Paris)
}

thread_cpu() {  # PID : "group ticks" per thread group (names without their numbers)
  for t in /proc/"$1"/task/*; do
    # A thread may end between the listing and the reads (an index filter's builder).
    { name=$(tr ' ' _ <"$t/comm") && ticks=$(awk '{print $14 + $15}' "$t/stat"); } 2>/dev/null || continue
    echo "$name $ticks"
  done | awk '{n = $1; sub(/[-_]?[0-9]+$/, "", n); a[n] += $2} END {for (k in a) print k, a[k]}' | sort
}

# cpu_split BEFORE AFTER REQUESTS : "group µs  " per request for each thread
# group that used CPU between two `thread_cpu` snapshots.
cpu_split() {
  join "$1" "$2" | awk -v n="$3" -v t="$(awk -v hz="$(getconf CLK_TCK)" 'BEGIN {print 1e6 / hz}')" \
    '$3 > $2 {printf "%s %.1f  ", $1, ($3 - $2) * t / n}'
}
