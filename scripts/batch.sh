#!/usr/bin/env bash
# A batch filling the capacity live work leaves idle, measured from outside
# on loopback: `sluice serve --upstream URL --concurrency 16` (the Batch API
# on, by default) in front of a `sluice mock` provider with 16 slots, and
# interactive load from `sluice load` at 60% of the provider's capacity.
# Two runs with the same arrivals: the live load alone, then the live load
# with a batch of N chat completions submitted two seconds in
# (`sluice batch submit`). Prints the live success and p99 of both runs, how
# busy the provider's slots were while the batch ran (its in_service,
# sampled every 200 ms), and the batch's time against N ÷ the spare
# capacity (capacity − live rate).
#
#   scripts/batch.sh [items] [seed]
#   MEDIAN=100ms scripts/batch.sh 10000   # a faster provider, for a large batch in minutes
set -euo pipefail
cd "$(dirname "$0")/.."
items=${1:-600}
seed=${2:-1}
median=${MEDIAN:-1s}
slots=16
tmp=$(mktemp -d)
bin=$tmp/sluice
go build -o "$bin" ./cmd/sluice
# The mock's median is 1 s; gpt-4o-mini runs at 0.5× (500 ms median,
# lognormal sigma 0.5: mean = 0.5·e^0.125 s).
msec=$(python3 -c "s='$median'; print(float(s[:-2])/1000 if s.endswith('ms') else float(s[:-1]))")
cap=$(python3 -c "import math; print(round($slots / ($msec * 0.5 * math.exp(0.125)), 2))")
live=$(python3 -c "print(round(0.6 * $cap, 1))")
spare=$(python3 -c "print(round($cap - $live, 2))")
# Long enough for the batch to end inside the live load.
duration=$(python3 -c "import math; print(math.ceil($items / $spare * 1.4 + 10))")s

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

python3 - "$items" > "$tmp/batch.jsonl" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"custom_id": f"item-{i}", "method": "POST", "url": "/v1/chat/completions",
                      "body": {"model": "gpt-4o-mini", "max_tokens": 64, "messages": [{"role": "user", "content": f"item {i}"}]}}))
PY

run() { # name with-batch
  local name=$1 with=$2
  local mport pport aport
  mport=$(free_port); pport=$(free_port); aport=$(free_port)
  "$bin" mock --listen 127.0.0.1:$mport --slots $slots --median $median --sigma 0.5 --seed $seed >/dev/null 2>&1 &
  local mpid=$!
  "$bin" serve --upstream http://127.0.0.1:$mport --concurrency $slots --batch-db "$tmp/$name.db" \
    --listen 127.0.0.1:$pport --admin 127.0.0.1:$aport >/dev/null 2>&1 &
  local spid=$!
  pids=($mpid $spid)
  for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$aport/readyz && break; sleep 0.1; done
  "$bin" load --target http://127.0.0.1:$pport --rate "$live" --duration "$duration" --mix interactive=1 \
    --policy polite --seed "$seed" --json > "$tmp/$name.json" &
  local lpid=$!
  pids+=($lpid)
  if [ "$with" = 1 ]; then
    sleep 2
    local start end
    start=$(date +%s.%N)
    # Sample the provider's busy slots while the batch runs.
    ( while :; do curl -s http://127.0.0.1:$mport/mock/v1/stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["in_service"])'; sleep 0.2; done ) > "$tmp/busy" 2>/dev/null &
    local spl=$!
    pids+=($spl)
    "$bin" batch submit "$tmp/batch.jsonl" --gateway http://127.0.0.1:$pport --window 1h --poll 200ms > "$tmp/$name.batch" 2>/dev/null
    end=$(date +%s.%N)
    kill $spl; wait $spl 2>/dev/null || true
    python3 - "$start" "$end" "$tmp/busy" "$slots" "$items" "$spare" "$tmp/$name.batch" <<'PY'
import sys
start, end, busy, slots, items, spare, out = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), sys.argv[7]
b = [int(l) for l in open(busy) if l.strip()]
took, ideal = end - start, items / spare
status = [l for l in open(out).read().splitlines() if l.startswith("batch ") and " of " in l]
print(f"  {status[-1] if status else 'batch: no final status'}")
print(f"  batch of {items}: {took:.1f} s, items ÷ spare capacity = {ideal:.1f} s ({100*(took/ideal-1):+.1f}%); "
      f"provider slots busy {100*sum(b)/len(b)/slots:.1f}% while it ran ({len(b)} samples)")
PY
  fi
  wait $lpid
  kill $mpid $spid; wait $mpid $spid 2>/dev/null || true
  python3 - "$name" "$tmp/$name.json" <<'PY'
import json, sys
name, rep = sys.argv[1], json.load(open(sys.argv[2]))
c = rep["classes"][0]
print(f"{name:16s} interactive success {100*c['success_ratio']:6.2f}% ({c['requests']})  p50 {c['latency']['p50_ms']:.0f} ms  p99 {c['latency']['p99_ms']:.0f} ms")
PY
}

echo "provider: $slots slots, mock median $median (gpt-4o-mini at half of it) (capacity ≈ $cap/s); live interactive $live/s (60%), spare ≈ $spare/s; $duration per run, seed $seed"
run live-alone 0
run live+batch 1
