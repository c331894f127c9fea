#!/usr/bin/env bash
# Measures the latency the gateway adds: the same open-loop load (default
# 1000 requests/s for 20 s, no retries) sent straight to a zero-latency mock
# provider, then through `sluice serve`, all on loopback. Prints both
# reports' latency percentiles and the difference.
#
#   scripts/overhead.sh [rate] [duration] [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1000}
duration=${2:-20s}
runs=${3:-3}
bin=$(mktemp -d)/sluice
go build -o "$bin" ./cmd/sluice

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
mock_port=$(free_port); api_port=$(free_port); admin_port=$(free_port)
"$bin" mock --listen 127.0.0.1:$mock_port --slots 0 --median 0 >/dev/null &
mock_pid=$!
"$bin" serve --upstream http://127.0.0.1:$mock_port --concurrency 1024 --max-queue 1024 \
  --listen 127.0.0.1:$api_port --admin 127.0.0.1:$admin_port >/dev/null 2>&1 &
serve_pid=$!
trap 'kill $mock_pid $serve_pid 2>/dev/null; wait 2>/dev/null' EXIT
for port in $mock_port $api_port; do
  for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$port/v1/models && break; sleep 0.1; done
done

pct() { python3 -c 'import json,sys; r=json.load(sys.stdin); l=r["latency"]; print("%.0f %.0f %.4f" % (l["p50_ms"]*1000, l["p99_ms"]*1000, r["success_ratio"]))'; }
echo "run  direct_p50_us direct_p99_us  gateway_p50_us gateway_p99_us  added_p50_us added_p99_us"
for i in $(seq "$runs"); do
  read -r dp50 dp99 dok < <("$bin" load --target http://127.0.0.1:$mock_port --rate "$rate" --duration "$duration" --max-attempts 1 --seed "$i" --json | pct)
  read -r gp50 gp99 gok < <("$bin" load --target http://127.0.0.1:$api_port --rate "$rate" --duration "$duration" --max-attempts 1 --seed "$i" --json | pct)
  echo "$i  $dp50 $dp99  $gp50 $gp99  $((gp50-dp50)) $((gp99-dp99))   (success direct $dok, gateway $gok)"
done
