#!/usr/bin/env bash
# upload-quota.sh: one tenant uploads files in a loop into its quota while
# another makes live calls; the live calls' latency with and without the
# loop. `sluice mock` (median 50 ms) is the provider, `sluice load` the
# live tenant (RATE calls a second for SECS seconds, interactive), curl the
# uploader (UPLOADERS loops of 1 MB files, batch.max_tenant_files 50, so
# that it soon gets 429s). Each of the ROUNDS rounds runs the live load
# alone, then with the loop; it prints both p50 and p99 and the uploads'
# statuses.
#   ROUNDS=3 SECS=20 scripts/upload-quota.sh
set -euo pipefail
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-20}
RATE=${RATE:-20}
UPLOADERS=${UPLOADERS:-2}
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$dir"' EXIT
go build -o "$dir/sluice" ./cmd/sluice
free() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mport=$(free); port=$(free); admin=$(free)
"$dir/sluice" mock --listen 127.0.0.1:$mport --median 50ms --slots 64 >"$dir/mock.log" 2>&1 &
pids+=($!)
cat >"$dir/config.yaml" <<EOF
upstream: {url: "http://127.0.0.1:$mport", api_key_env: SLUICE_PROVIDER_KEY}
admission: {concurrency: 16}
tenants:
  - {name: uploader, api_keys_sha256: [$(printf sk-uploader | "$dir/sluice" hash-key)]}
  - {name: live, api_keys_sha256: [$(printf sk-live | "$dir/sluice" hash-key)]}
batch: {max_tenant_files: 50}
EOF
SLUICE_PROVIDER_KEY=sk-provider "$dir/sluice" serve --config "$dir/config.yaml" --listen 127.0.0.1:$port \
  --admin 127.0.0.1:$admin --batch-db "$dir/batch.db" 2>"$dir/log" &
pids+=($!)
for _ in $(seq 50); do curl -fs http://127.0.0.1:$admin/healthz >/dev/null && break; sleep 0.1; done
python3 - "$dir/in.jsonl" <<'PY'
import sys
line = '{"custom_id":"r%06d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"' + 'x' * 900 + '"}]}}\n'
with open(sys.argv[1], 'w') as f:
    for n in range(1000):
        f.write(line % n)
PY
live() {
  "$dir/sluice" load --target http://127.0.0.1:$port --api-key sk-live --rate "$RATE" --duration "${SECS}s" \
    --mix interactive=1 --json 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin); l=r["latency"]; print("p50 %.1f ms p99 %.1f ms (%d calls, success %.3f)" % (l["p50_ms"], l["p99_ms"], l["count"], r["success_ratio"]))'
}
uploads() {
  local end=$((SECONDS + SECS))
  while [ $SECONDS -lt $end ]; do
    curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:$port/v1/files -H 'Authorization: Bearer sk-uploader' \
      -F purpose=batch -F "file=@$dir/in.jsonl"
  done
}
for r in $(seq "$ROUNDS"); do
  echo "round $r alone:        $(live)"
  : >"$dir/codes"
  for _ in $(seq "$UPLOADERS"); do uploads >>"$dir/codes" & done
  echo "round $r with uploads: $(live)"
  wait $(jobs -p | grep -v -e "^${pids[0]}$" -e "^${pids[1]}$") 2>/dev/null || true
  echo "  uploads: $(sort "$dir/codes" | uniq -c | tr '\n' ' ')"
done
