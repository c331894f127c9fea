#!/usr/bin/env bash
# Observe mode against enforce mode on the same seeded storm, measured from
# outside on loopback: `sluice load` at 5× the capacity of a `sluice mock`
# provider with 16 slots (500 ms median calls), in front of it `sluice
# serve` with default flags but --concurrency 16 — once in enforce mode,
# once with --mode observe. One attempt per request (--max-attempts 1), so
# that both runs send the same calls: a refused caller's retries would be
# calls observe mode never sees. Prints, for each run, the refusals the
# callers received and what the gateway counted as refused or would-be
# refused (sluice_rejections_total, sluice_would_refuse_total), and the
# ratio of the two counts. In observe mode the callers get no 429 or 503:
# their answers are the provider's, or a 504 when the provider had not
# answered by the deadline the caller stated (X-Sluice-Timeout-Ms, which
# the polite callers send). About 2½ minutes with 30 s runs.
#
#   scripts/observe.sh [duration] [seed] [rate-multiple]
#   LEARN=1 (serve without --concurrency: the concurrency learnt, as by default)
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-30s}
seed=${2:-1}
mult=${3:-5}
slots=16
tmp=$(mktemp -d)
bin=$tmp/sluice
go build -o "$bin" ./cmd/sluice
cap=$(python3 -c "import math; print(round($slots / (0.5 * math.exp(0.125)), 2))")
rate=$(python3 -c "print(round($mult * $cap, 1))")

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

metric_sum() { # admin-port metric
  curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 ~ "^"m"({|$)" {s += $NF} END {printf "%d", s}'
}

run() { # name serve-flags...
  local name=$1
  shift
  local mport pport aport
  mport=$(free_port); pport=$(free_port); aport=$(free_port)
  "$bin" mock --listen 127.0.0.1:$mport --slots $slots --median 1s --sigma 0.5 --seed "$seed" >/dev/null 2>&1 &
  local mpid=$!
  local conc=(--concurrency $slots)
  [ -n "${LEARN:-}" ] && conc=()
  "$bin" serve --upstream http://127.0.0.1:$mport "${conc[@]}" \
    --listen 127.0.0.1:$pport --admin 127.0.0.1:$aport --batch-db "$tmp/$name.db" "$@" >/dev/null 2>&1 &
  local spid=$!
  pids=($mpid $spid)
  for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$aport/readyz && break; sleep 0.1; done
  "$bin" load --target http://127.0.0.1:$pport --rate "$rate" --duration "$duration" \
    --mix "interactive=0.7,batch=0.2,speculative=0.1" --deadline "interactive=2s,batch=10s,speculative=2s" \
    --policy polite --max-attempts 1 --max-in-flight 5000 --seed "$seed" --json > "$tmp/$name.json"
  local refused would
  refused=$(metric_sum $aport sluice_rejections_total)
  would=$(metric_sum $aport sluice_would_refuse_total)
  kill $mpid $spid; wait $mpid $spid 2>/dev/null || true
  python3 - "$name" "$tmp/$name.json" "$refused" "$would" <<'PY'
import json, sys
name, rep, refused, would = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4])
codes = rep.get("status_codes") or {}
refusals = sum(n for c, n in codes.items() if str(c) in ("429", "503"))
status = " ".join(f"{c}:{n}" for c, n in sorted(codes.items()))
print(f"{name:8s} requests {rep['requests']:5d}  answers {status}  (429/503 sent: {refusals})  gateway counted refused {refused:5d}, would refuse {would:5d}  goodput {rep['goodput']:5.1f}/s")
open(sys.argv[2] + ".counts", "w").write(f"{refused} {would}\n")
PY
}

echo "provider: $slots slots, 500 ms median calls (capacity ≈ $cap/s); ${mult}× = $rate/s for $duration, seed $seed, one attempt per request"
run enforce
run observe --mode observe
read -r enforced _ < "$tmp/enforce.json.counts"
read -r _ would < "$tmp/observe.json.counts"
python3 -c "print(f'would refuse / refused: {$would}/{$enforced} = {$would/max($enforced,1):.3f}')"
