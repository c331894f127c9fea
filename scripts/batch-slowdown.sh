#!/usr/bin/env bash
# A batch accepted under a window that turns out too short: the provider
# slows down ×4 a few seconds after the batch starts. `sluice serve
# --concurrency 16` in front of `sluice mock --slots 16 --median 100ms
# --step-at 5s --step-factor 4`; a batch of N chat completions with a
# window of W (`sluice batch submit --window`), which at the provider's
# first speed would end in about 60% of it. At the window the items left
# are expired: the script prints the batch's request_counts, the error
# file's lines by code, and checks that completed + failed = total, that
# every custom_id is in exactly one of the two files, and that the batch
# ended within a few seconds of its window.
#
#   scripts/batch-slowdown.sh [items] [window]
set -euo pipefail
cd "$(dirname "$0")/.."
items=${1:-4000}
window=${2:-25s}
tmp=$(mktemp -d)
bin=$tmp/sluice
go build -o "$bin" ./cmd/sluice
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
python3 - "$items" > "$tmp/batch.jsonl" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"custom_id": f"item-{i}", "method": "POST", "url": "/v1/chat/completions",
                      "body": {"model": "gpt-4o-mini", "max_tokens": 64, "messages": [{"role": "user", "content": f"item {i}"}]}}))
PY
mport=$(free_port); pport=$(free_port); aport=$(free_port)
"$bin" mock --listen 127.0.0.1:$mport --slots 16 --median 100ms --sigma 0.5 --seed 1 --step-at 5s --step-factor 4 >/dev/null 2>&1 &
pids+=($!)
"$bin" serve --upstream http://127.0.0.1:$mport --concurrency 16 --batch-db "$tmp/b.db" \
  --listen 127.0.0.1:$pport --admin 127.0.0.1:$aport >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$aport/readyz && break; sleep 0.1; done
sleep 1 # the mock's clock started with it: the slowdown comes 4 s into the batch
start=$(date +%s.%N)
"$bin" batch submit "$tmp/batch.jsonl" --gateway http://127.0.0.1:$pport --window "$window" --poll 200ms > "$tmp/out" 2>/dev/null || true
end=$(date +%s.%N)
id=$(awk '/^batch batch_/{sub(":","",$2); print $2; exit}' "$tmp/out")
"$bin" batch results "$id" --gateway http://127.0.0.1:$pport > "$tmp/ok.jsonl" 2>/dev/null || true
"$bin" batch results "$id" --errors --gateway http://127.0.0.1:$pport > "$tmp/err.jsonl" 2>/dev/null || true
curl -s http://127.0.0.1:$pport/v1/batches/$id > "$tmp/batch.json"
python3 - "$tmp/batch.json" "$tmp/ok.jsonl" "$tmp/err.jsonl" "$start" "$end" "$items" "$window" <<'PY'
import json, sys, collections
b = json.load(open(sys.argv[1]))
ok = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
err = [json.loads(l) for l in open(sys.argv[3]) if l.strip()]
start, end, items, window = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
c = b["request_counts"]
codes = collections.Counter((e.get("error") or {}).get("code") or f"status {e['response']['status_code']}" for e in err)
ids = collections.Counter(l["custom_id"] for l in ok + err)
print(f"batch of {items}, window {window}: status {b['status']} after {end-start:.1f} s "
      f"(expired_at - created_at = {b['expired_at'] - b['created_at'] if b.get('expired_at') else None} s)")
print(f"request_counts {c}; output {len(ok)} lines, error file {dict(codes)}")
checks = {
  "completed + failed = total": c["completed"] + c["failed"] == c["total"] == items,
  "output lines = completed": len(ok) == c["completed"],
  "error lines = failed": len(err) == c["failed"],
  "each custom_id once in the two files": len(ids) == items and max(ids.values()) == 1,
}
for k, v in checks.items():
    print(f"  {'ok ' if v else 'BAD'} {k}")
PY
