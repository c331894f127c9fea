#!/usr/bin/env bash
# Checks examples/systemd/sluice.service with systemd-analyze: `verify`
# (syntax, known directives, executables; any message at all fails, since
# verify exits 0 on an unknown directive) and `security --offline`, whose
# exposure score must stay at or under 2.0 ("OK" ends at 3.9).
#
# verify checks that ExecStart's binary exists: the unit is checked as a
# copy whose ExecStart names a sluice built here, the only difference.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v systemd-analyze >/dev/null; then
	echo "systemd-check.sh: systemd-analyze is not installed (Debian: package systemd)" >&2
	exit 1
fi
unit=examples/systemd/sluice.service
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${SLUICE_BIN:-}" ]; then # built by the caller (scripts/ship-check.sh)
	cp "$SLUICE_BIN" "$work/sluice"
else
	go build -o "$work/sluice" ./cmd/sluice
fi
sed "s|/usr/local/bin/sluice|$work/sluice|g" "$unit" >"$work/sluice.service"

out=$(systemd-analyze verify "$work/sluice.service" 2>&1) || {
	printf '%s\n' "$out" >&2
	exit 1
}
if [ -n "$out" ]; then
	printf 'systemd-check.sh: systemd-analyze verify complained:\n%s\n' "$out" >&2
	exit 1
fi
echo "systemd-check.sh: $unit: systemd-analyze verify ok"

score=$(systemd-analyze security --offline=yes "$work/sluice.service" 2>&1 | sed -n 's/.*Overall exposure level for sluice.service: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || {
	echo "systemd-check.sh: no exposure score from systemd-analyze security" >&2
	exit 1
}
if awk -v s="$score" 'BEGIN { exit !(s > 2.0) }'; then
	echo "systemd-check.sh: exposure $score, want ≤ 2.0 (systemd-analyze security --offline=yes $unit)" >&2
	exit 1
fi
echo "systemd-check.sh: $unit: exposure level $score (systemd-analyze security --offline=yes)"
