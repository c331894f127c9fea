#!/usr/bin/env bash
# Pools per (deployment, model), measured from outside on loopback with the
# real binaries: `sluice serve` in front of `sluice mock`, `sluice load` as
# the callers. Two scenarios (both by default, or name one):
#
# slow-model: one deployment serving two models, the provider unlimited
#   (--slots 0) so that only the gateway's slots count. Interactive load on
#   each model (one `sluice load` per model, polite clients, 10 s deadline)
#   at LOAD (0.85) of its pool's capacity. The fast model's load runs in two
#   phases of PHASE each; between them the slow model (which loads through
#   both) is made four times slower (POST /mock/v1/slowdown). Pools: an
#   `upstreams:` deployment with the two models at 8 slots each; baseline:
#   the same deployment as a single `upstream:` with admission.concurrency
#   16 (8+8). Prints the fast model's goodput, success and p99 before and
#   after the step, for both. About 50 s a setup.
#
# tpm: one deployment whose model has a tokens-per-minute limit (TPM,
#   30000), batch load (polite, 30 s deadline) at 3× the calls the limit
#   allows (tpm ÷ the tokens a call is charged: prompt chars/4 + max_tokens).
#   Three gateways: the pool with `tpm:` configured, the pool with no tpm
#   configured (learned from the provider's x-ratelimit-* headers, the
#   default path), and a single `upstream:` (no pacing: only the adaptive
#   concurrency limit on 429s). Prints the provider's 429s (its
#   `rate_limited`) as a share of the calls it received, and goodput
#   against what the limit allows. First, one call of max_tokens TPM−100
#   through the gateway empties the minute's bucket (which starts full, a
#   minute's burst), so that the window measures the limit's rate. About
#   70 s a setup (the window, then the queued calls' 30 s deadlines).
#
#   scripts/pools.sh [slow-model|tpm|all] [seed]
#   PHASE=20s LOAD=0.85 MEDIAN=200ms SIGMA=0.5 FACTOR=4 TPM=30000 TPM_DURATION=40s scripts/pools.sh
#   (FACTOR=1: the same run with no slowdown, to see the noise of the figure;
#   SIGMA=0: exact service times for slow-model, which removes most of it)
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
seed=${2:-1}
phase=${PHASE:-20s}
load=${LOAD:-0.85}
median=${MEDIAN:-200ms}
sigma=${SIGMA:-0.5}
tpm=${TPM:-30000}
tpm_duration=${TPM_DURATION:-40s}
factor=${FACTOR:-4}
tmp=$(mktemp -d)
bin=$tmp/sluice
go build -o "$bin" ./cmd/sluice

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
secs() { python3 -c "s='$1'; print(float(s[:-2])/1000 if s.endswith('ms') else float(s[:-1]) if s.endswith('s') else float(s[:-1])*60)"; }

# start_pair NAME CONFIG MOCKFLAGS...: a mock and a gateway with CONFIG
# (upstream URL substituted for @MOCK@); sets mport pport aport.
start_pair() {
  local name=$1 config=$2
  shift 2
  mport=$(free_port); pport=$(free_port); aport=$(free_port)
  "$bin" mock --listen 127.0.0.1:$mport --seed "$seed" "$@" >/dev/null 2>&1 &
  local mpid=$!
  sed "s|@MOCK@|http://127.0.0.1:$mport|" "$config" > "$tmp/$name.yaml"
  "$bin" serve --config "$tmp/$name.yaml" --listen 127.0.0.1:$pport --admin 127.0.0.1:$aport \
    --batch-db "$tmp/$name.db" >"$tmp/$name.log" 2>&1 &
  local spid=$!
  pids=($mpid $spid)
  for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$aport/readyz && break; sleep 0.1; done
  curl -sf -o /dev/null http://127.0.0.1:$aport/readyz || { echo "gateway $name did not start:"; cat "$tmp/$name.log"; exit 1; }
}
stop_pair() { kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true; pids=(); }

slow_model() {
  local fast=gpt-4o-mini slow=gpt-4.1-mini
  # The mock's service time is lognormal (SIGMA) around MEDIAN times the
  # model's factor (gpt-4o-mini 0.5, gpt-4.1-mini 0.6): mean = median·f·e^(sigma²/2).
  local m capf caps ratef rates
  m=$(secs "$median")
  capf=$(python3 -c "import math; print(round(8 / ($m * 0.5 * math.exp($sigma ** 2 / 2)), 2))")
  caps=$(python3 -c "import math; print(round(8 / ($m * 0.6 * math.exp($sigma ** 2 / 2)), 2))")
  ratef=$(python3 -c "print(round($load * $capf, 1))")
  rates=$(python3 -c "print(round($load * $caps, 1))")
  local p
  p=$(secs "$phase")
  local slowdur
  slowdur=$(python3 -c "print(int(2 * $p + 15))")s
  echo "slow-model: mock median $median (sigma $sigma), unlimited slots; $fast ($ratef/s = $load of 8 slots ≈ $capf/s) and $slow ($rates/s = $load of 8 slots ≈ $caps/s), interactive polite 10 s; $slow ×$factor after $phase; seed $seed"
  cat > "$tmp/single.cfg" <<EOF
upstream: {url: @MOCK@}
admission: {concurrency: 16}
EOF
  cat > "$tmp/pools.cfg" <<EOF
upstreams:
  - name: mock
    url: @MOCK@
    concurrency: 16
    models:
      - {name: $fast, concurrency: 8}
      - {name: $slow, concurrency: 8}
EOF
  for setup in single pools; do
    start_pair "a-$setup" "$tmp/$setup.cfg" --slots 0 --median "$median" --sigma "$sigma"
    local target=http://127.0.0.1:$pport
    "$bin" load --target "$target" --model $slow --rate "$rates" --duration "$slowdur" --mix interactive=1 \
      --policy polite --seed $((seed + 1)) --json > "$tmp/a-$setup-slow.json" 2>/dev/null &
    local spid=$!
    pids+=($spid)
    "$bin" load --target "$target" --model $fast --rate "$ratef" --duration "$phase" --mix interactive=1 \
      --policy polite --seed "$seed" --json > "$tmp/a-$setup-before.json"
    curl -sf -o /dev/null -X POST -d "{\"model\":\"$slow\",\"factor\":$factor}" "http://127.0.0.1:$mport/mock/v1/slowdown"
    "$bin" load --target "$target" --model $fast --rate "$ratef" --duration "$phase" --mix interactive=1 \
      --policy polite --seed "$seed" --json > "$tmp/a-$setup-after.json"
    stop_pair
    python3 - "$setup" "$tmp/a-$setup-before.json" "$tmp/a-$setup-after.json" <<'PY'
import json, sys
name, b, a = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
def line(r): return (r["goodput"], 100 * r["success_ratio"], r["latency"]["p99_ms"], r["requests"])
gb, sb, pb, nb = line(b)
ga, sa, pa, na = line(a)
print(f"  {name:7s} fast model  before: goodput {gb:5.1f}/s success {sb:5.1f}% p99 {pb:5.0f} ms ({nb})"
      f"   after: goodput {ga:5.1f}/s success {sa:5.1f}% p99 {pa:5.0f} ms ({na})"
      f"   goodput {100*(ga/gb-1):+5.1f}%  p99 {100*(pa/pb-1):+6.1f}%")
PY
  done
}

tpm_run() {
  local model=gpt-4o-mini maxtok=64
  # What the mock charges a call of `sluice load` at arrival: its prompt
  # ("Reply with one short sentence about rivers.", 42 characters) at 4
  # characters a token, rounded up, plus max_tokens (mockllm/request.go).
  local per_call=$(( (42 + 3) / 4 + maxtok ))
  local d rate
  d=$(secs "$tpm_duration")
  rate=$(python3 -c "print(round(3 * $tpm / 60 / $per_call, 2))")
  echo "tpm: $model limited to $tpm tokens/min at the mock ($per_call tokens a call: $(python3 -c "print(round($tpm/60/$per_call, 2))") calls/s); batch load (polite, 30 s deadline) at $rate/s (3×) for $tpm_duration; mock median $median, unlimited slots; seed $seed"
  echo "  (first, one call through the gateway of max_tokens $((tpm - 100)) empties the minute's bucket: the window measures the limit's rate, not its first minute's burst)"
  printf '"%s": {latency_factor: 0.5, tpm: %s}\n' "$model" "$tpm" > "$tmp/models.yaml"
  cat > "$tmp/tpm-configured.cfg" <<EOC
upstreams:
  - name: mock
    url: @MOCK@
    concurrency: 16
    models:
      - {name: $model, tpm: $tpm}
EOC
  cat > "$tmp/tpm-learned.cfg" <<EOC
upstreams:
  - name: mock
    url: @MOCK@
    concurrency: 16
    models:
      - {name: $model}
EOC
  cat > "$tmp/tpm-single.cfg" <<EOC
upstream: {url: @MOCK@}
admission: {concurrency: 16}
EOC
  for setup in configured learned single; do
    start_pair "tpm-$setup" "$tmp/tpm-$setup.cfg" --slots 0 --median "$median" --sigma 0.5 --models "$tmp/models.yaml"
    local target=http://127.0.0.1:$pport
    curl -sf -o /dev/null -H 'Content-Type: application/json' \
      -d "{\"model\":\"$model\",\"max_tokens\":$((tpm - 100)),\"messages\":[{\"role\":\"user\",\"content\":\"warm up\"}]}" \
      "$target/v1/chat/completions" || { echo "  $setup: the warm-up call failed"; exit 1; }
    local before
    before=$(curl -s "http://127.0.0.1:$mport/mock/v1/stats")
    "$bin" load --target "$target" --model $model --max-tokens $maxtok --rate "$rate" --duration "$tpm_duration" --mix batch=1 \
      --deadline batch=30s --policy polite --max-in-flight 5000 --seed "$seed" --json > "$tmp/tpm-$setup.json"
    curl -s "http://127.0.0.1:$mport/mock/v1/stats" > "$tmp/tpm-$setup.stats"
    stop_pair
    python3 - "$setup" "$tmp/tpm-$setup.json" "$before" "$tmp/tpm-$setup.stats" "$tpm" "$per_call" "$d" <<'PY'
import json, sys
name, rep, before, after = sys.argv[1], json.load(open(sys.argv[2])), json.loads(sys.argv[3]), json.load(open(sys.argv[4]))
tpm, per_call, d = int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
received = after["received"] - before["received"]
limited = after["rate_limited"] - before["rate_limited"]
# The window's allowance: the limit's rate over it, plus the ~100 tokens the
# warm-up left in the bucket.
allowed = (tpm * d / 60 + 100) / per_call / d
g = rep["goodput"]
print(f"  {name:10s} provider 429s {limited:4d} of {received:4d} calls ({100*limited/max(received,1):5.1f}%)   "
      f"goodput {g:5.2f}/s = {100*g/allowed:5.1f}% of the limit's {allowed:.2f}/s   "
      f"success {100*rep['success_ratio']:5.1f}% of {rep['requests']}")
PY
  done
}

main() {
case $which in
  slow-model) slow_model ;;
  tpm) tpm_run ;;
  all) slow_model; tpm_run ;;
  *) echo "usage: scripts/pools.sh [slow-model|tpm|all] [seed]" >&2; exit 2 ;;
esac
}
# Run from a function, and exit: an edit to this file mid-run cannot change what runs.
main; exit
