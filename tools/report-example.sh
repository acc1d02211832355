#!/bin/sh
# report-example.sh regenerates the README's pictures of `scavctl top` and
# `scavctl report` from a real job: examples/resumable_cnn.py under the
# scavenger policy (probes, then settles), on this machine's CPUs, at an
# assumed price of $2.50/h so that the report shows what the job cost (with
# no price the report says "no price set" and draws no cost).
#
#   docs/top-example.txt     scavctl top --once while the job runs optimised
#   docs/report-example.png  scavctl report JOB --format png
#   docs/report-example.html scavctl report JOB --format html
#
# Run it through `make report-example` (which builds bin/ first).
set -eu
BIN=${BIN:-bin}
PYTHON=${PYTHON:-/usr/bin/python3}
DOCS=${DOCS:-docs}
state=$(mktemp -d /tmp/scav-report-XXXXXX)
trap 'rm -rf "$state"' EXIT
mkdir -p "$DOCS"

OMP_NUM_THREADS=1 "$BIN/scavctl" --state-dir "$state" run --name example --workers 1:2 --batch-size 32:256 \
	--policy scavenger --price 2.5 --target-steps 3000 -- "$PYTHON" examples/resumable_cnn.py >"$state/run.out" 2>"$state/run.err" &
run=$!

# One frame of top once the policy has chosen (or after two minutes).
i=0
while [ $i -lt 240 ]; do
	if "$BIN/scavctl" --state-dir "$state" top --once >"$state/top.txt" 2>/dev/null && grep -q ' optimised ' "$state/top.txt"; then
		sleep 10 # the relaunch, then a few steps in the chosen configuration
		"$BIN/scavctl" --state-dir "$state" top --once >"$state/top.txt"
		break
	fi
	sleep 0.5
	i=$((i + 1))
done
cp "$state/top.txt" "$DOCS/top-example.txt"

wait $run || { cat "$state/run.err" >&2; exit 1; }
id=$(sed -n 's/^scavctl: job \([A-Za-z0-9_-]*\):.*/\1/p' "$state/run.err" | head -n 1)
"$BIN/scavctl" --state-dir "$state" report "$id" --format png --out "$DOCS/report-example.png"
"$BIN/scavctl" --state-dir "$state" report "$id" --format html --out "$DOCS/report-example.html"
"$BIN/scavctl" --state-dir "$state" report "$id"
