#!/usr/bin/env bash
# Open streams and short calls through `sluice serve` and through the bare
# httputil.ReverseProxy (scripts/bareproxy) in the same run, each printing
# its figures and sluice's ratio to the bare proxy's. The provider is
# `streamload upstream` (scripts/streamload), a process of its own: a
# chunk every 100 ms for 60 s per stream, or a JSON answer at once. Both
# proxies are started afresh for every measurement, so that each starts
# from its idle memory; `sluice serve` runs with --concurrency 20000
# --max-queue 0, so that admission never refuses, and its access log goes
# to /dev/null.
#
#   scripts/streams.sh streams [runs] [n...]        # default 3 runs of 1000 2500
#   scripts/streams.sh calls [runs] [rate...]       # default 3 runs of 1000 2000 3000 4000
#
# streams: per stream, the target's resident memory above its idle
# memory, its CPU time per chunk delivered, and the chunk's delay from the
# upstream's write to the client, p50 and p99, over a 10 s window once
# every stream is open (WINDOW=10s). calls: for each rate, 5 s of calls
# (DURATION=5s) at that rate, open loop: the rate achieved, p50 and p99,
# errors by kind ("unsolicited" counts Go's "Unsolicited response"), and
# the target's CPU-seconds per 1,000 calls. The last lines are medians
# over the runs. BIN picks the sluice binary (default: built from this
# tree); SLUICE_ARGS adds flags to sluice serve, SLUICE_YAML lines to its
# config file ("server: {saturation: {max_scheduling_delay: 5ms}}"; not
# a server: section with TARGETS' unshed). TARGETS picks what is
# measured (default "bare sluice"); "unshed" is sluice with its shedding
# on a saturated CPU off (server.saturation.disabled), to measure what the
# shedding does: calls then also print how many were refused (429 or 503
# with Retry-After) and the refusals' p99; p99_ms_steady is the answered
# calls' p99 leaving out those sent in the first 2 s (a quarter of a
# shorter run), the onset of the overload.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-streams}
runs=${2:-3}
shift $(( $# >= 2 ? 2 : $# ))
window=${WINDOW:-10s}
duration=${DURATION:-5s}
dir=$(mktemp -d)
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
bin=${BIN:-$dir/sluice}
[ -n "${BIN:-}" ] || go build -o "$bin" ./cmd/sluice
go build -o "$dir/bareproxy" ./scripts/bareproxy
go build -o "$dir/streamload" ./scripts/streamload

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }

up_port=$(free_port)
"$dir/streamload" upstream --listen 127.0.0.1:$up_port --hold 60s >/dev/null 2>&1 &
pids+=($!)
wait_port $up_port

# start TARGET: starts a fresh proxy; sets port and pid.
start() {
	port=$(free_port)
	case $1 in
	bare) "$dir/bareproxy" --upstream http://127.0.0.1:$up_port --listen 127.0.0.1:$port 2>/dev/null & ;;
	sluice | unshed)
		# The config file names the provider; SLUICE_YAML adds to it.
		printf 'upstream: {url: "http://127.0.0.1:%s"}\n%s\n' "$up_port" "${SLUICE_YAML:-}" >"$dir/$1.yaml"
		[ "$1" = unshed ] && printf 'server: {saturation: {disabled: true}}\n' >>"$dir/$1.yaml"
		$bin serve --config "$dir/$1.yaml" --listen 127.0.0.1:$port --admin 127.0.0.1:$(free_port) \
			--concurrency 20000 --max-queue 0 ${SLUICE_ARGS:-} >/dev/null 2>&1 & ;;
	esac
	pid=$!
	wait_port $port
	sleep 0.5
}
stop() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }

sizes=("$@")
if [ $# -eq 0 ]; then
	case $mode in
	streams) sizes=(1000 2500) ;;
	*) sizes=(1000 2000 3000 4000) ;;
	esac
fi
for r in $(seq "$runs"); do
	for s in "${sizes[@]}"; do
		for t in ${TARGETS:-bare sluice}; do
			start $t
			if [ "$mode" = streams ]; then
				line=$("$dir/streamload" streams --target http://127.0.0.1:$port --n "$s" --pid $pid --window "$window")
			else
				line=$("$dir/streamload" calls --target http://127.0.0.1:$port --rate "$s" --duration "$duration" --pid $pid)
			fi
			stop
			echo "run $r $mode $s $t $line" | tee -a "$dir/results"
			sleep 1
		done
	done
done

# Medians over the runs, and sluice's ratio to the bare proxy's.
python3 - "$dir/results" "$mode" <<'PY'
import json, sys, statistics
rows = {}
for l in open(sys.argv[1]):
    f = l.split(' ', 5)
    rows.setdefault((int(f[3]), f[4]), []).append(json.loads(f[5]))
keys = (['rss_per_stream_kb', 'cpu_per_chunk_us', 'delay_p50_ms', 'delay_p99_ms', 'errors'] if sys.argv[2] == 'streams'
        else ['achieved', 'p50_ms', 'p99_ms', 'cpu_s_per_1000', 'refused', 'refusal_p99_ms', 'p99_ms_steady'])
targets = [t for t in ('bare', 'sluice', 'unshed') if any(k[1] == t for k in rows)]
print('medians over %d runs' % len(next(iter(rows.values()))))
for size in sorted({k[0] for k in rows}):
    med = {}
    for t in targets:
        med[t] = {k: statistics.median(r[k] for r in rows[(size, t)]) for k in keys}
        errs = [r['errors'] for r in rows[(size, t)]] if sys.argv[2] == 'calls' else []
        print('%6d %-6s %s%s' % (size, t, '  '.join('%s=%.2f' % (k, v) for k, v in med[t].items()),
              ('  errors=' + json.dumps(errs)) if errs else ''))
    for t in targets:
        if t == 'bare' or 'bare' not in med:
            continue
        print('%6d ratio %s/bare  %s' % (size, t, '  '.join('%s=%.2f' % (k, med[t][k] / med['bare'][k]) for k in keys
              if med['bare'][k] and k not in ('errors', 'refused', 'refusal_p99_ms', 'p99_ms_steady'))))
PY
