#!/usr/bin/env bash
# Long streams through `sluice serve` with default deadlines: N streams
# (default 100) of D ms each (default 45000, past the interactive class's
# 30 s default_timeout) from clients that state no deadline, through the
# gateway in front of `sluice mock`, on loopback; prints how many ended
# with [DONE] and sluice_calls_ended_total. HDR adds a request header
# (e.g. HDR='X-Sluice-Timeout-Ms: 20000'); BIN picks the sluice binary
# (default: built from this tree), to compare with another build.
#
#   scripts/long-streams.sh [N] [D]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100}
d=${2:-45000}
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
bin=${BIN:-}
if [ -z "$bin" ]; then
	bin=$dir/sluice
	go build -o "$bin" ./cmd/sluice
fi
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mp=$(port) gp=$(port) ap=$(port)
"$bin" mock --listen 127.0.0.1:$mp --slots $((2 * n)) >/dev/null 2>&1 &
"$bin" serve --upstream http://127.0.0.1:$mp --concurrency $((2 * n)) --listen 127.0.0.1:$gp --admin 127.0.0.1:$ap >"$dir/serve.log" 2>&1 &
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$ap/readyz" >/dev/null && break; sleep 0.1; done
start=$SECONDS
pids=()
for i in $(seq "$n"); do
	(curl -sN --max-time $((d / 1000 + 60)) -H 'Content-Type: application/json' -H "X-Mock-Latency-Ms: $d" ${HDR:+-H "$HDR"} \
		-d '{"model":"gpt-4o-mini","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}' \
		"http://127.0.0.1:$gp/v1/chat/completions" | grep -c '\[DONE\]' >"$dir/s.$i" || true) &
	pids+=($!)
done
wait "${pids[@]}"
echo "long-streams.sh: $n streams of ${d} ms${HDR:+ with $HDR}: $(cat "$dir"/s.* | awk '{s+=$1} END {print s}') of $n complete, in $((SECONDS - start)) s"
curl -s "http://127.0.0.1:$ap/metrics" | grep '^sluice_calls_ended_total' || true
