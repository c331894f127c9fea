#!/usr/bin/env bash
# Measures the latency the gateway adds. The same open-loop load (default
# 1000 requests/s for 10 s, no retries) is sent by `sluice load` straight to a
# zero-latency `sluice mock`, and through each proxy in front of it, all on
# loopback:
#
#   direct        the mock itself
#   reverseproxy  scripts/bareproxy: a bare httputil.ReverseProxy with the
#                 gateway's transport settings and nothing of sluice — the
#                 floor of any gateway built on Go's net/http
#   haproxy       HAProxy, when `haproxy` is on PATH (the yardstick)
#   sluice        sluice serve, defaults
#
# Each run sends the load to every target in turn, so that they share the
# machine's mood; the added latency is each target's percentile minus the
# direct one of the same run, and the last lines are medians over runs.
# Latency is per attempt, from the moment the generator sent it to the last
# byte of the answer ("attempt_latency" in `sluice load --json`): the time
# the target took, without the generator's own timer lag (Go timers wake on
# millisecond ticks when a process is idle), which is the same on all sides.
#
# SLUICE_ENV sets environment variables for `sluice serve` only, e.g.
# SLUICE_ENV=GOMAXPROCS=1.
#
# With DASHBOARD=1 one client follows the admin dashboard's event stream
# (/admin/v1/events, a sample a second) for the whole run, as an open
# dashboard tab would: the sampler's cost shows in sluice's figures.
#
# With REDIS=redis://host:port a fifth target, sluice+redis, is the same
# `sluice serve` with a store.redis section on that Redis (its own cluster
# name): leasing the concurrency and syncing the books run beside the
# requests, never on their path, and this shows what they cost them.
#
# With BASELINE=/path/to/sluice another target, baseline, is that binary's
# `sluice serve` with the same flags, measured in the same runs: a change to
# the gateway compared back to back with the build before it (go build -o
# /tmp/sluice-before ./cmd/sluice on the old commit), cpu/req and added p50
# side by side on the same machine's mood.
#
# With WRK=1 and wrk installed, each run also measures every target with
# wrk (a C generator, closed loop: ten connections, each waiting 10 ms
# between requests, about 1,000 requests/s; scripts/overhead.lua), as a
# check on the Go generator.
#
#   scripts/overhead.sh [rate] [duration] [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1000}
duration=${2:-10s}
runs=${3:-5}
dir=$(mktemp -d)
go build -o "$dir/sluice" ./cmd/sluice
go build -o "$dir/bareproxy" ./scripts/bareproxy

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
mock_port=$(free_port); api_port=$(free_port); admin_port=$(free_port); bare_port=$(free_port)
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
"$dir/sluice" mock --listen 127.0.0.1:$mock_port --slots 0 --median 0 >/dev/null 2>&1 &
pids+=($!); mock_pid=$!
env ${SLUICE_ENV:-} "$dir/sluice" serve --upstream http://127.0.0.1:$mock_port --concurrency 1024 --max-queue 1024 \
  --listen 127.0.0.1:$api_port --admin 127.0.0.1:$admin_port >/dev/null 2>&1 &
pids+=($!); sluice_pid=$!
"$dir/bareproxy" --upstream http://127.0.0.1:$mock_port --listen 127.0.0.1:$bare_port >/dev/null 2>&1 &
pids+=($!); bare_pid=$!
# name=port=pid: the pid is the process that serves the target (the mock for
# direct), whose CPU time and context switches are counted with perf.
targets="direct=$mock_port=$mock_pid reverseproxy=$bare_port=$bare_pid"
if command -v haproxy >/dev/null; then
  ha_port=$(free_port)
  cat >"$dir/haproxy.cfg" <<CFG
global
    maxconn 4096
    nbthread 2
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    option http-keep-alive
frontend fe
    bind 127.0.0.1:$ha_port
    default_backend be
backend be
    http-reuse always
    server mock 127.0.0.1:$mock_port
CFG
  haproxy -f "$dir/haproxy.cfg" -db >/dev/null 2>&1 &
  pids+=($!)
  targets="$targets haproxy=$ha_port=$!"
else
  echo "(haproxy not installed: apt-get install haproxy to compare with it)"
fi
targets="$targets sluice=$api_port=$sluice_pid"
if [ -n "${BASELINE:-}" ]; then
  base_port=$(free_port); base_admin=$(free_port)
  env ${SLUICE_ENV:-} "$BASELINE" serve --upstream http://127.0.0.1:$mock_port --concurrency 1024 --max-queue 1024 \
    --listen 127.0.0.1:$base_port --admin 127.0.0.1:$base_admin >/dev/null 2>&1 &
  pids+=($!)
  targets="$targets baseline=$base_port=$!"
fi
if [ -n "${REDIS:-}" ]; then
  store_port=$(free_port); store_admin=$(free_port)
  cat >"$dir/store.yaml" <<CFG
upstream: {url: "http://127.0.0.1:$mock_port"}
admission: {concurrency: 1024, max_queue: 1024}
store: {redis: {url: "$REDIS", cluster: "overhead-$$"}}
CFG
  env ${SLUICE_ENV:-} "$dir/sluice" serve --config "$dir/store.yaml" \
    --listen 127.0.0.1:$store_port --admin 127.0.0.1:$store_admin >/dev/null 2>&1 &
  pids+=($!)
  targets="$targets sluice+redis=$store_port=$!"
fi
for port in $mock_port $api_port $bare_port ${ha_port:-} ${store_port:-} ${base_port:-}; do
  for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$port/v1/models && break; sleep 0.1; done
done
if [ "${DASHBOARD:-}" = 1 ]; then
  curl -sN http://127.0.0.1:$admin_port/admin/v1/events >"$dir/events" &
  pids+=($!)
  echo "(DASHBOARD=1: one client follows http://127.0.0.1:$admin_port/admin/v1/events)"
fi

if [ "${WRK:-}" = 1 ] && ! command -v wrk >/dev/null; then
  echo "WRK=1 but wrk is not installed (apt-get install wrk)" >&2
  exit 2
fi
# cpu_ticks prints the machine's stolen and total CPU ticks so far: on a
# shared VM the hypervisor "steals" time for its other guests, and a run
# that lost much of it is noise rather than a measurement of the target.
cpu_ticks() { awk '/^cpu /{print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
# With perf (Debian's linux-perf) the target process's CPU time and context
# switches are counted during its run: far steadier than latency on a noisy
# machine, and the context switches are where a proxy's latency goes here.
perf_ok=
if command -v perf >/dev/null && perf stat -e context-switches -x, true >/dev/null 2>&1; then perf_ok=1; fi
for i in $(seq "$runs"); do
  for t in $targets; do
    IFS== read -r name port pid <<<"$t"
    cpu_ticks >"$dir/$name.$i.steal"
    if [ -n "$perf_ok" ]; then
      perf stat -x, -e task-clock,context-switches -p "$pid" -o "$dir/$name.$i.perf" &
      perf_pid=$!
    fi
    "$dir/sluice" load --target http://127.0.0.1:$port --rate "$rate" --duration "$duration" \
      --max-attempts 1 --seed "$i" --json >"$dir/$name.$i.json"
    if [ -n "$perf_ok" ]; then kill -INT $perf_pid; wait $perf_pid 2>/dev/null || true; fi
    cpu_ticks >>"$dir/$name.$i.steal"
    if [ "${WRK:-}" = 1 ]; then
      wrk -t1 -c10 -d"$duration" --latency -s scripts/overhead.lua \
        http://127.0.0.1:$port/v1/chat/completions >"$dir/$name.$i.wrk"
    fi
  done
done

python3 - "$dir" "$runs" $targets <<'PY'
import json, statistics, sys
d, runs, targets = sys.argv[1], int(sys.argv[2]), [t.split("=")[0] for t in sys.argv[3:]]
def load(name, i):
    r = json.load(open(f"{d}/{name}.{i}.json"))
    a = r["attempt_latency"]
    return a["p50_ms"] * 1000, a["p99_ms"] * 1000, r["success_ratio"], r["requests"]
def perf(name, i, n):
    try:
        rows = [l.split(",") for l in open(f"{d}/{name}.{i}.perf") if l[:1].isdigit()]
    except FileNotFoundError:
        return "", ""
    v = {r[2]: float(r[0]) for r in rows if len(r) > 2}
    return f"{v.get('task-clock', 0) * 1000 / n:.0f}", f"{v.get('context-switches', 0) / n:.1f}"
def steal(name, i):
    (s0, t0), (s1, t1) = [map(int, l.split()) for l in open(f"{d}/{name}.{i}.steal")]
    return 100 * (s1 - s0) / max(t1 - t0, 1)
print("attempt latency in µs (sent to last byte); added = target − direct of the same run;")
print("steal = share of the machine's CPU time the hypervisor gave to other guests during the run")
print("cpu/req, cs/req = the target process's CPU time (µs) and context switches per request (perf)")
print(f"{'run':>3} {'target':>13} {'p50':>7} {'p99':>8} {'added p50':>10} {'added p99':>10} {'success':>8} {'steal':>6} {'cpu/req':>8} {'cs/req':>7}")
added = {t: ([], []) for t in targets}
costs = {t: ([], []) for t in targets}
for i in range(1, runs + 1):
    d50, d99, _, _ = load("direct", i)
    for t in targets:
        p50, p99, ok, n = load(t, i)
        added[t][0].append(p50 - d50); added[t][1].append(p99 - d99)
        cpu, cs = perf(t, i, n)
        if cpu:
            costs[t][0].append(float(cpu)); costs[t][1].append(float(cs))
        print(f"{i:>3} {t:>13} {p50:>7.0f} {p99:>8.0f} {p50 - d50:>10.0f} {p99 - d99:>10.0f} {ok:>8.4f} {steal(t, i):>5.1f}% {cpu:>8} {cs:>7}")
lags = [json.load(open(f"{d}/{t}.{i}.json"))["send_lag"]["p50_ms"] * 1000 for t in targets for i in range(1, runs + 1)]
print(f"the generator's own send lag (scheduled arrival to send), p50: {statistics.median(lags):.0f} µs (median over all runs)")
print(f"median over {runs} runs:")
for t in targets:
    line = f"    {t:>13}  added p50 {statistics.median(added[t][0]):6.0f} µs   added p99 {statistics.median(added[t][1]):7.0f} µs"
    if costs[t][0]:
        line += f"   cpu {statistics.median(costs[t][0]):4.0f} µs/req   {statistics.median(costs[t][1]):4.1f} cs/req"
    # The ratio to the bare reverse proxy of the same run: steadier than
    # microseconds on a shared, noisy machine.
    ratio = [a / b for a, b in zip(added[t][0], added["reverseproxy"][0]) if b > 0]
    if t not in ("direct", "reverseproxy") and ratio:
        line += f"   added p50 ×{statistics.median(ratio):.2f} the reverse proxy's"
    print(line)
if "baseline" in targets:
    # Run by run, sluice against the baseline binary: the ratio of medians
    # of per-run ratios, so that a slow run slows both sides alike.
    def per_run(a, b):
        return statistics.median([x / y for x, y in zip(a, b) if y > 0] or [float("nan")])
    line = f"sluice / baseline: added p50 ×{per_run(added['sluice'][0], added['baseline'][0]):.3f}"
    if costs["sluice"][0] and costs["baseline"][0]:
        line += f"   cpu/req ×{per_run(costs['sluice'][0], costs['baseline'][0]):.3f}"
    print(line)
PY
if [ "${DASHBOARD:-}" = 1 ]; then
  echo "dashboard samples received during the runs: $(grep -c '^data: ' "$dir/events" || true)"
fi
if [ "${WRK:-}" = 1 ]; then
python3 - "$dir" "$runs" $targets <<'PY'
import re, statistics, sys
d, runs, targets = sys.argv[1], int(sys.argv[2]), [t.split("=")[0] for t in sys.argv[3:]]
unit = {"us": 1, "ms": 1000, "s": 1e6}
def load(name, i):
    text = open(f"{d}/{name}.{i}.wrk").read()
    pct = {}
    for q, v, u in re.findall(r"^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$", text, re.M):
        pct[q] = float(v) * unit[u]
    return pct["50"], pct["99"]
print("wrk (closed loop, ~1,000 requests/s), latency in µs; added = target − direct of the same run")
added = {t: ([], []) for t in targets}
for i in range(1, runs + 1):
    d50, d99 = load("direct", i)
    for t in targets:
        p50, p99 = load(t, i)
        added[t][0].append(p50 - d50); added[t][1].append(p99 - d99)
        print(f"{i:>3} {t:>13} {p50:>7.0f} {p99:>8.0f} {p50 - d50:>10.0f} {p99 - d99:>10.0f}")
print(f"median over {runs} runs:")
for t in targets[1:]:
    print(f"    {t:>13}  added p50 {statistics.median(added[t][0]):6.0f} µs   added p99 {statistics.median(added[t][1]):7.0f} µs")
PY
fi
