#!/usr/bin/env bash
# Retry amplification at overload, for real on loopback: `sluice load` at
# LOAD× the capacity of a `sluice mock` provider, through `sluice serve`,
# three ways: naive clients with the gateway's retry budgets off, naive
# clients with them on, and clients using sluice's Go client package
# (--policy client). Prints goodput, attempts per request, and the share of
# the calls admitted upstream that were retries (from the gateway's
# /metrics).
#
#   scripts/retries.sh [load] [duration] [seed]
set -euo pipefail
cd "$(dirname "$0")/.."
load=${1:-5}
duration=${2:-30s}
seed=${3:-1}
slots=8
median=300ms   # the load's model, gpt-4o-mini, runs at 0.5×: 150ms calls
tmp=$(mktemp -d)
bin=$tmp/sluice
go build -o "$bin" ./cmd/sluice
# Capacity: slots / mean service (lognormal sigma 0.5: mean = median·e^0.125).
rate=$(python3 -c "import math; print(round($load * $slots / (0.150 * math.exp(0.125)), 1))")

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

run() { # name policy budget(on|off)
  local name=$1 policy=$2 budget=$3
  local mport aport dport
  mport=$(free_port); aport=$(free_port); dport=$(free_port)
  "$bin" mock --listen 127.0.0.1:$mport --slots $slots --median $median --sigma 0.5 --seed $seed >/dev/null 2>&1 &
  local mpid=$!
  cat > "$tmp/$name.yaml" <<YAML
listen: 127.0.0.1:$aport
admin: 127.0.0.1:$dport
upstream: {url: "http://127.0.0.1:$mport"}
admission: {concurrency: $slots, max_queue: 64, initial_service_time: 150ms}
retries: {disabled: $([ "$budget" = off ] && echo true || echo false)}
YAML
  "$bin" serve --config "$tmp/$name.yaml" >/dev/null 2>&1 &
  local spid=$!
  pids=($mpid $spid)
  for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$dport/readyz && break; sleep 0.1; done
  "$bin" load --target http://127.0.0.1:$aport --rate "$rate" --duration "$duration" --policy "$policy" --seed "$seed" --json > "$tmp/$name.json"
  curl -s http://127.0.0.1:$dport/metrics > "$tmp/$name.metrics"
  kill $mpid $spid; wait $mpid $spid 2>/dev/null || true
  python3 - "$name" "$tmp/$name.json" "$tmp/$name.metrics" <<'PY'
import json, re, sys
name, rep, met = sys.argv[1], json.load(open(sys.argv[2])), open(sys.argv[3]).read()
adm = {"first": 0.0, "retry": 0.0}
for m in re.finditer(r'^sluice_admissions_total\{attempt="(\w+)".*\} (\S+)$', met, re.M):
    adm[m.group(1)] += float(m.group(2))
total = adm["first"] + adm["retry"]
share = adm["retry"] / total if total else 0
print(f"{name:22s} goodput {rep['goodput']:6.1f}/s  success {100*rep['success_ratio']:5.1f}%  "
      f"attempts/request {rep['attempts_per_request']:.2f}  admitted upstream {int(total):5d}, retries {100*share:4.1f}%")
PY
}

echo "provider: $slots slots, 150ms median calls (capacity $(python3 -c "print(round($rate/$load,1))")/s); load ${load}× = $rate requests/s for $duration, seed $seed"
run naive-no-budget naive off
run naive-budget naive on
run client-budget client on
