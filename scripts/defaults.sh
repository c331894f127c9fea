#!/usr/bin/env bash
# What `sluice serve --upstream URL --concurrency 16` does with no other flag,
# measured from outside on loopback: `sluice load` against the gateway in
# front of a `sluice mock` provider with 16 slots, two overload scenarios,
# each run twice — with the defaults (the derived waiting room) and with
# --max-queue 0 (no waiting room, the default before the waiting room was
# derived). Prints success per class; takes about 2½ minutes with 30 s runs. The generator may hold 5,000 requests
# at once: batch work waits up to its 30 s deadline in the gateway's queue,
# and `sluice load`'s default cap of 1,000 would drop interactive arrivals
# before they are sent (client_overflow), which is not the gateway's doing.
#
#   scripts/defaults.sh [duration] [seed]
#
# spec-flood: speculative work at 4.5× capacity beside interactive at 0.5×
#             (5× in all), default deadlines (interactive 10 s, speculative 5 s).
#             Naive clients: a fixed per-attempt timeout of half the deadline,
#             immediate retries, no Retry-After.
# mixed:      3× capacity, 30% interactive with 2 s deadlines, 70% batch with 30 s.
#             Polite clients, whose every attempt carries the time left to the
#             caller's deadline: a naive client's 1 s attempt cannot hold this
#             provider's p95 call (≈ 1.1 s), so the gateway rightly starts none
#             of them and the figure would say nothing about the waiting room.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-30s}
seed=${2:-1}
slots=16
tmp=$(mktemp -d)
bin=$tmp/sluice
go build -o "$bin" ./cmd/sluice
# The mock's median is 1 s; the load's model, gpt-4o-mini, runs at 0.5×
# (500 ms median, lognormal sigma 0.5: mean = 0.5·e^0.125 s).
cap=$(python3 -c "import math; print(round($slots / (0.5 * math.exp(0.125)), 2))")

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

run() { # name queue-flag rate mix deadlines policy
  local name=$1 qflag=$2 rate=$3 mix=$4 deadlines=$5 policy=$6
  local mport pport aport
  mport=$(free_port); pport=$(free_port); aport=$(free_port)
  "$bin" mock --listen 127.0.0.1:$mport --slots $slots --median 1s --sigma 0.5 --seed $seed >/dev/null 2>&1 &
  local mpid=$!
  # shellcheck disable=SC2086
  "$bin" serve --upstream http://127.0.0.1:$mport --concurrency $slots \
    --listen 127.0.0.1:$pport --admin 127.0.0.1:$aport $qflag >/dev/null 2>&1 &
  local spid=$!
  pids=($mpid $spid)
  for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$aport/readyz && break; sleep 0.1; done
  local dflag=()
  [ -n "$deadlines" ] && dflag=(--deadline "$deadlines")
  "$bin" load --target http://127.0.0.1:$pport --rate "$rate" --duration "$duration" \
    --mix "$mix" "${dflag[@]}" --policy "$policy" --max-in-flight 5000 --seed "$seed" --json > "$tmp/${name//\//-}.json"
  kill $mpid $spid; wait $mpid $spid 2>/dev/null || true
  python3 - "$name" "$tmp/${name//\//-}.json" <<'PY'
import json, sys
name, rep = sys.argv[1], json.load(open(sys.argv[2]))
parts = [f"{c['name']} {100*c['success_ratio']:5.1f}% ({c['requests']})" for c in rep["classes"]]
print(f"{name:24s} goodput {rep['goodput']:6.1f}/s  success {100*rep['success_ratio']:5.1f}%  " + "  ".join(parts))
PY
}

echo "provider: $slots slots, 500 ms median calls (capacity ≈ $cap/s); $duration per run, seed $seed"
flood=$(python3 -c "print(round(5 * $cap, 1))")
mixed=$(python3 -c "print(round(3 * $cap, 1))")
run spec-flood/defaults "" "$flood" "interactive=0.1,speculative=0.9" "" naive
run spec-flood/max-queue-0 "--max-queue 0" "$flood" "interactive=0.1,speculative=0.9" "" naive
run mixed/defaults "" "$mixed" "interactive=0.3,batch=0.7" "interactive=2s,batch=30s" polite
run mixed/max-queue-0 "--max-queue 0" "$mixed" "interactive=0.3,batch=0.7" "interactive=2s,batch=30s" polite
