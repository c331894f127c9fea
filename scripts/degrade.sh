#!/usr/bin/env bash
# Degrading under load, measured from outside on loopback with the real
# binaries: one `sluice mock` deployment (256 slots: the gateway's
# concurrency is the limit; median 200 ms, lognormal sigma 0.5) serving
# gpt-4o (1.5× the median: mean 340 ms) and gpt-4o-mini (0.5×: 113 ms),
# `sluice serve` with `upstreams:` (8 slots per model) and
# `degrade: {ladder: {gpt-4o: gpt-4o-mini}, classes: [batch]}`, and one
# `sluice load` of polite callers asking for gpt-4o at 3× its pool's
# capacity (8 / 340 ms), gpt-4o-mini idle but for what is degraded.
# Two runs with the same arrivals: degrade on, then the BASELINE, degrade
# off. Prints per class the success and p99, the answers by the model that
# gave them (X-Sluice-Model, from the access log), and
# sluice_degraded_requests_total{cause="load"}.
#
#   scripts/degrade.sh [duration] [seed]
#   MIX=interactive=0.2,batch=0.8 DEADLINES=interactive=5s,batch=20s scripts/degrade.sh
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-30s}
seed=${2:-1}
mix=${MIX:-interactive=0.1,batch=0.9}
deadlines=${DEADLINES:-interactive=5s,batch=20s}
slots=8
tmp=$(mktemp -d)
bin=$tmp/sluice
go build -o "$bin" ./cmd/sluice
big=$(python3 -c "import math; print(round($slots / (0.2 * 1.5 * math.exp(0.125)), 2))")
rate=$(python3 -c "print(round(3 * $big, 1))")

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
ready() { for _ in $(seq 100); do curl -s -o /dev/null "$1" && return; sleep 0.1; done; echo "not ready: $1" >&2; exit 1; }

run() { # name degrade(0|1)
  local name=$1 degrade=$2 m l a
  m=$(free_port); l=$(free_port); a=$(free_port)
  "$bin" mock --listen 127.0.0.1:$m --slots 256 --median 200ms --sigma 0.5 --seed "$seed" >/dev/null 2>&1 &
  local mpid=$!
  pids=($mpid)
  cat > "$tmp/gw.yaml" <<EOF
listen: 127.0.0.1:$l
admin: 127.0.0.1:$a
log: {format: json}
upstreams:
  - name: mock
    url: http://127.0.0.1:$m
    concurrency: $slots
    models: [{name: gpt-4o}, {name: gpt-4o-mini}]
EOF
  [ "$degrade" = 1 ] && printf 'degrade:\n  ladder: {gpt-4o: gpt-4o-mini}\n  classes: [batch]\n' >> "$tmp/gw.yaml"
  "$bin" serve --config "$tmp/gw.yaml" 2> "$tmp/$name.log" >/dev/null &
  local spid=$!
  pids+=($spid)
  ready "http://127.0.0.1:$m/mock/v1/stats"
  ready "http://127.0.0.1:$a/readyz"
  "$bin" load --target "http://127.0.0.1:$l" --model gpt-4o --rate "$rate" --duration "$duration" --mix "$mix" \
    --deadline "$deadlines" --policy polite --max-in-flight 5000 --seed "$seed" --json > "$tmp/$name.json"
  local degraded
  degraded=$(curl -s "http://127.0.0.1:$a/metrics" | awk '$1 == "sluice_degraded_requests_total{cause=\"load\"}" { print $2; f=1 } END { if (!f) print 0 }')
  kill $spid $mpid; wait $spid $mpid 2>/dev/null || true
  python3 - "$name" "$tmp/$name.json" "$tmp/$name.log" "$degraded" <<'PY'
import collections, json, sys
name, rep, log, degraded = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
by = collections.Counter()
for line in open(log):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("path") == "/v1/chat/completions" and e.get("status") == 200:
        by[(e.get("class"), e.get("model"))] += 1
print(f"{name:22s} degraded{{cause=load}} {float(degraded):.0f}")
for c in rep["classes"]:
    models = ", ".join(f"{m} {n}" for (cl, m), n in sorted(by.items()) if cl == c["name"])
    print(f"  {c['name']:12s} success {100*c['success_ratio']:6.2f}% ({c['requests']})  p50 {c['latency']['p50_ms']:.0f} ms  "
          f"p99 {c['latency']['p99_ms']:.0f} ms   answered by: {models or 'none'}")
print(f"  failures {dict(sorted(rep['failures'].items()))}")
PY
}

echo "gpt-4o: $slots slots, capacity ≈ $big/s; load $rate/s (3×) asking for gpt-4o, mix $mix, deadlines $deadlines, polite callers; gpt-4o-mini ($slots slots, ≈ $(python3 -c "import math; print(round($slots / (0.2 * 0.5 * math.exp(0.125)), 1))")/s) idle; $duration per run, seed $seed"
run "degrade on (batch)" 1
run "BASELINE degrade off" 0
