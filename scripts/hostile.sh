#!/usr/bin/env bash
# Hostile connections: slow bodies and idle connections from one address
# against `sluice serve` under a 1,024 file-descriptor limit, while a probe
# client on another loopback address sends valid requests, each on a fresh
# connection (scripts/slowloris). The same attack runs against the gateway
# built from OLD_REF (default: the commit before the connection limits) and
# from the working tree, one after the other, with the server: section at
# its defaults (derived from the descriptor limit). The attack and the
# probe are two processes. A third run repeats the attack on the new
# gateway with the attacker at nice 19, the way an attacker elsewhere does
# not take the gateway's CPU; a last one sends the probe alone: the
# machine's own latency at that moment, to read the others against.
#
#   scripts/hostile.sh [slow] [idle] [duration]      # default 2000 2000 30s
#   OLD_REF=main scripts/hostile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
slow=${1:-2000}
idle=${2:-2000}
duration=${3:-30s}
# The commit before the one that added the connection limits' listener.
old_ref=${OLD_REF:-$(git log --diff-filter=A --format=%H -- gateway/listener.go | tail -1)^}
dir=$(mktemp -d)
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT

go build -o "$dir/sluice" ./cmd/sluice
go build -o "$dir/slowloris" ./scripts/slowloris
mkdir "$dir/old"
git archive "$old_ref" | tar -x -C "$dir/old"
(cd "$dir/old" && go build -o "$dir/sluice-old" ./cmd/sluice)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }

mock_port=$(free_port)
"$dir/sluice" mock --listen 127.0.0.1:$mock_port --slots 0 --median 0 >/dev/null 2>&1 &
pids+=($!)
wait_port $mock_port
key=sk-hostile-probe
digest=$(echo -n $key | "$dir/sluice" hash-key)

for which in old new new-nice baseline; do
  bin="$dir/sluice"; [ $which = old ] && bin="$dir/sluice-old"
  n_slow=$slow; n_idle=$idle; [ $which = baseline ] && n_slow=0 n_idle=0
  nice=0; [ $which = new-nice ] && nice=19
  api_port=$(free_port); admin_port=$(free_port)
  cat >"$dir/$which.yaml" <<CFG
listen: 127.0.0.1:$api_port
admin: 127.0.0.1:$admin_port
upstream: {url: "http://127.0.0.1:$mock_port", api_key_env: SLUICE_HOSTILE_KEY}
admission: {concurrency: 64, max_queue: 256}
tenants:
  - {name: probe, api_keys_sha256: [$digest]}
CFG
  (ulimit -n 1024; SLUICE_HOSTILE_KEY=sk-upstream exec "$bin" serve --config "$dir/$which.yaml") >/dev/null 2>"$dir/$which.log" &
  gw=$!; pids+=($gw)
  wait_port $api_port
  echo "== $which ($([ $which = old ] && echo "$old_ref" || echo "working tree")): $n_slow slow-body + $n_idle idle connections from 127.0.0.1 (nice $nice) for $duration, ulimit -n 1024"
  grep -o 'read_header_timeout=.*' "$dir/$which.log" | head -1 || true
  if [ $which != baseline ]; then
    nice -n $nice "$dir/slowloris" --target 127.0.0.1:$api_port --probe=false --slow "$n_slow" --idle "$n_idle" --duration "$duration" &
    attack=$!
  fi
  "$dir/slowloris" --target 127.0.0.1:$api_port --key $key --pid $gw --slow 0 --idle 0 --duration "$duration"
  [ $which != baseline ] && wait $attack
  echo "gateway log: $(grep -c 'too many open files' "$dir/$which.log" || true) lines with \"too many open files\""
  if [ $which != old ]; then
    curl -s "http://127.0.0.1:$admin_port/metrics" | grep '^sluice_connections_refused_total' || true
  fi
  kill $gw; wait $gw 2>/dev/null || true
done
