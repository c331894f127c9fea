#!/usr/bin/env bash
# Failover between two deployments of one model, measured from outside on
# loopback with the real binaries: `sluice mock --deployments` (each
# deployment with 256 slots: the gateway's concurrency is the limit),
# `sluice serve` with `upstreams:` (primary then secondary, 8 slots each,
# gpt-4o-mini: 200 ms × 0.5 median, lognormal sigma 0.5, mean 113 ms), and
# `sluice load` with polite callers (each attempt carries the time left to
# its deadline).
#
# slowed: the primary slowed ×4 from the start (POST /mock/v1/slowdown),
#         load at 1.4× the two deployments' combined capacity
#         (8/(4·mean) + 8/mean), interactive with a 3 s deadline. Prints
#         goodput against the combined capacity, and what came past a
#         deadline: late answers, callers left with no answer at their
#         deadline (timeout), calls cut at the deadline (504) and answers
#         the mock produced for a caller gone. BASELINE: the single
#         `upstream:` pointing at the primary alone.
# down:   the primary's URL a closed port (connection refused), load at
#         half the secondary's capacity; at DOWN_FOR seconds a mock starts
#         listening on the primary's port. Prints failures against the
#         BASELINE (the secondary alone, same arrivals), the calls moved
#         off the primary (sluice_upstream_failovers_total: one per
#         connection attempt to it) against the probe schedule (1 s, then
#         doubling to 30 s), and when traffic went back to the primary.
#
#   scripts/failover.sh [slowed|down|all] [duration] [seed]
#   DOWN_FOR=10 (seconds the primary is down in `down`)
#   GATEWAY_BIN=path (run `sluice serve` from this binary — a build of an
#               older commit, as a baseline against the same mock and load)
#   SLOW_AT=10  (`slowed`: slow the primary this many seconds into the run
#               instead of from the start; the ideal is then the load
#               until SLOW_AT — below both deployments' unslowed capacity —
#               and the combined slowed capacity after)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
duration=${2:-30s}
seed=${3:-1}
down_for=${DOWN_FOR:-10}
slow_at=${SLOW_AT:-0}
slots=8
tmp=$(mktemp -d)
bin=$tmp/sluice
go build -o "$bin" ./cmd/sluice
gw=${GATEWAY_BIN:-$bin}
secs=${duration%s}
mean=$(python3 -c "import math; print(0.2 * 0.5 * math.exp(0.125))")

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

ready() { for _ in $(seq 100); do curl -s -o /dev/null "$1" && return; sleep 0.1; done; echo "not ready: $1" >&2; exit 1; }
# metric NAME-AND-LABELS ADMIN-PORT: the value, 0 when absent.
metric() { curl -s "http://127.0.0.1:$2/metrics" | awk -v m="$1" '$1 == m { print $2; found=1 } END { if (!found) print 0 }'; }

received() { curl -s "http://127.0.0.1:$1/mock/v1/stats" | sed -n 's/.*"received":\([0-9]*\).*/\1/p'; }

start_mocks() { # primary-port secondary-port: both deployments, primary listed only when its port is given
  local f=$tmp/mocks.yaml
  echo "deployments:" > "$f"
  [ -n "$1" ] && printf '  - name: primary\n    listen: 127.0.0.1:%s\n' "$1" >> "$f"
  printf '  - name: secondary\n    listen: 127.0.0.1:%s\n' "$2" >> "$f"
  "$bin" mock --deployments "$f" --slots 256 --median 200ms --sigma 0.5 --seed "$seed" >/dev/null 2>&1 &
  mpid=$!
  pids+=($mpid)
  [ -n "$1" ] && ready "http://127.0.0.1:$1/mock/v1/stats"
  ready "http://127.0.0.1:$2/mock/v1/stats"
}

start_gateway() { # config-file admin-port listen-port
  "$gw" serve --config "$1" >/dev/null 2>&1 &
  spid=$!
  pids+=($spid)
  ready "http://127.0.0.1:$2/readyz"
}

two_deployments() { # file primary-url secondary-url listen admin
  cat > "$1" <<EOF
listen: 127.0.0.1:$4
admin: 127.0.0.1:$5
upstreams:
  - {name: primary, url: "$2", concurrency: $slots, models: [{name: gpt-4o-mini}]}
  - {name: secondary, url: "$3", concurrency: $slots, models: [{name: gpt-4o-mini}]}
EOF
}

one_upstream() { # file url listen admin
  cat > "$1" <<EOF
listen: 127.0.0.1:$3
admin: 127.0.0.1:$4
upstream: {url: "$2"}
admission: {concurrency: $slots}
EOF
}

report() { # name json extra...
  python3 - "$@" <<'PY'
import json, sys
name, rep = sys.argv[1], json.load(open(sys.argv[2]))
extra = " ".join(sys.argv[3:])
rej = rep["rejections"]
print(f"  {name:18s} goodput {rep['goodput']:6.1f}/s  success {100*rep['success_ratio']:5.1f}% ({rep['requests']})  "
      f"late {rep['late']}  timeout {rej.get('timeout', 0)}  504 {rep['status_codes'].get('504', 0)}  "
      f"p99 {rep['latency']['p99_ms']:.0f} ms  refusals {dict(sorted(rej.items()))} {extra}")
PY
}

slowed() {
  local combined rate
  combined=$(python3 -c "print(round($slots / (4 * $mean) + $slots / $mean, 2))")
  rate=$(python3 -c "print(round(1.4 * $combined, 1))")
  local ideal
  ideal=$(python3 -c "print(round(($slow_at * min($rate, 2 * $slots / $mean) + ($secs - $slow_at) * $combined) / $secs, 2))")
  echo "slowed: primary ×4 $([ "$slow_at" = 0 ] && echo "from the start" || echo "at $slow_at s"); ideal goodput $ideal/s; combined capacity $combined/s (primary $(python3 -c "print(round($slots/(4*$mean),1))")/s + secondary $(python3 -c "print(round($slots/$mean,1))")/s); load $rate/s (1.4×), deadline 3 s, $duration, seed $seed"
  for mode in two single; do
    local p s l a
    p=$(free_port); s=$(free_port); l=$(free_port); a=$(free_port)
    pids=()
    start_mocks "$p" "$s"
    [ "$slow_at" = 0 ] && curl -s -X POST -d '{"model":"*","factor":4}' "http://127.0.0.1:$p/mock/v1/slowdown" >/dev/null
    if [ $mode = two ]; then
      two_deployments "$tmp/gw.yaml" "http://127.0.0.1:$p" "http://127.0.0.1:$s" "$l" "$a"
    else
      one_upstream "$tmp/gw.yaml" "http://127.0.0.1:$p" "$l" "$a"
    fi
    start_gateway "$tmp/gw.yaml" "$a"
    "$bin" load --target "http://127.0.0.1:$l" --model gpt-4o-mini --rate "$rate" --duration "$duration" \
      --mix interactive=1 --deadline interactive=3s --policy polite --max-in-flight 5000 --seed "$seed" --json > "$tmp/slowed-$mode.json" &
    local lpid=$!
    pids+=($lpid)
    if [ "$slow_at" != 0 ]; then
      sleep "$slow_at"
      curl -s -X POST -d '{"model":"*","factor":4}' "http://127.0.0.1:$p/mock/v1/slowdown" >/dev/null
    fi
    wait $lpid
    local ps ss
    ps=$(curl -s "http://127.0.0.1:$p/mock/v1/stats")
    ss=$(curl -s "http://127.0.0.1:$s/mock/v1/stats")
    kill "$spid" "$mpid"; wait "$spid" "$mpid" 2>/dev/null || true
    local label=$([ $mode = two ] && echo "primary+secondary" || echo "BASELINE primary")
    report "$label" "$tmp/slowed-$mode.json" "$(python3 - "$ps" "$ss" "$ideal" "$tmp/slowed-$mode.json" <<'PY'
import json, sys
p, s, comb, rep = json.loads(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3]), json.load(open(sys.argv[4]))
print(f"| {100*rep['goodput']/comb:.1f}% of the ideal; mock delivered primary {p['delivered']} secondary {s['delivered']}, "
      f"produced for a caller gone {p['wasted']+p['aborted']+s['wasted']+s['aborted']}")
PY
)"
  done
}

down() {
  local rate
  rate=$(python3 -c "print(round(0.5 * $slots / $mean, 1))")
  echo "down: primary refuses connections for ${down_for} s, then listens; load $rate/s (half the secondary's capacity), deadline 3 s, $duration, seed $seed"
  for mode in two single; do
    local p s l a
    p=$(free_port); s=$(free_port); l=$(free_port); a=$(free_port)
    pids=()
    start_mocks "" "$s"
    if [ $mode = two ]; then
      two_deployments "$tmp/gw.yaml" "http://127.0.0.1:$p" "http://127.0.0.1:$s" "$l" "$a"
    else
      one_upstream "$tmp/gw.yaml" "http://127.0.0.1:$s" "$l" "$a"
    fi
    start_gateway "$tmp/gw.yaml" "$a"
    "$bin" load --target "http://127.0.0.1:$l" --model gpt-4o-mini --rate "$rate" --duration "$duration" \
      --mix interactive=1 --deadline interactive=3s --policy polite --seed "$seed" --json > "$tmp/down-$mode.json" &
    local lpid=$! t0
    pids+=($lpid)
    t0=$(date +%s%N)
    if [ $mode = two ]; then
      # Every half second: connection attempts to the primary so far (calls
      # moved off it), whether it is down, and what it has received.
      local back=0 ppid=""
      : > "$tmp/timeline"
      while kill -0 $lpid 2>/dev/null; do
        local el=$(( ($(date +%s%N) - t0) / 1000000 ))
        if [ $back = 0 ] && [ $el -ge $((down_for * 1000)) ]; then
          "$bin" mock --listen "127.0.0.1:$p" --slots 256 --median 200ms --sigma 0.5 --seed "$seed" >/dev/null 2>&1 &
          ppid=$!; pids+=($ppid); back=1
          ready "http://127.0.0.1:$p/mock/v1/stats"
        fi
        local recv=0
        [ $back = 1 ] && recv=$(received "$p")
        echo "$el $(metric 'sluice_upstream_failovers_total{pool="primary/gpt-4o-mini"}' "$a") $(metric 'sluice_pool_down{deployment="primary",model="gpt-4o-mini",pool="primary/gpt-4o-mini"}' "$a") $recv $(received "$s")" >> "$tmp/timeline"
        sleep 0.5
      done
      wait $lpid || true
      kill "$ppid" 2>/dev/null || true
    else
      wait $lpid
    fi
    kill "$spid" "$mpid"; wait "$spid" "$mpid" 2>/dev/null || true
    if [ $mode = two ]; then
      report "primary down" "$tmp/down-$mode.json"
      python3 - "$tmp/timeline" "$down_for" <<'PY'
import math, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
down_for = float(sys.argv[2])
rows = [(float(t) / 1000, float(f), float(d), int(p), int(s)) for t, f, d, p, s in rows]
# The probe schedule: the first refusal, then probes at 1, 3, 7, 15, 31, ... s.
def schedule(t):
    n, at, step = 1, 1.0, 1.0
    while at <= t:
        n, step = n + 1, min(2 * step, 30)
        at += step
    return n
at_back = [r for r in rows if r[0] >= down_for]
last_down = max((r for r in rows if r[0] < down_for + 0.5), key=lambda r: r[0], default=rows[-1])
print(f"    connection attempts to the primary while down: {int(last_down[1])} in {last_down[0]:.0f} s "
      f"(probe schedule allows {schedule(last_down[0])} + the calls in flight at the first refusal); "
      f"{int(rows[-1][1])} moved off it in all")
ret = next((r for r in rows if r[3] > 0), None)
if ret:
    tail = [r for r in rows if r[0] >= ret[0]]
    dp, ds = tail[-1][3] - tail[0][3], tail[-1][4] - tail[0][4]
    print(f"    primary listening again at {down_for:.0f} s; first traffic to it seen at {ret[0]:.1f} s "
          f"(sampled every 0.5 s); after that it took {dp} calls, the secondary {ds}")
else:
    print("    the primary got no traffic after it came back")
for r in rows[::max(1, len(rows) // 20)]:
    print(f"      t={r[0]:5.1f}s  moved-off-primary {int(r[1]):3d}  down {int(r[2])}  primary received {r[3]:5d}  secondary received {r[4]:5d}")
PY
    else
      report "BASELINE secondary" "$tmp/down-$mode.json"
    fi
  done
}

case $what in
  slowed) slowed ;;
  down) down ;;
  all) slowed; down ;;
  *) echo "usage: $0 [slowed|down|all] [duration] [seed]" >&2; exit 2 ;;
esac
