#!/bin/sh
# Figures of the launchers and hooks (issue 5), measured by their tests on
# the real daemons; writes docs/bench-ops.md. Needs root (Slurm, network
# namespaces). Usage: make bench-ops
set -eu
GO=${GO:-go}
out=docs/bench-ops.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

$GO test ./cmd/scavctl -run '^$' -bench SlurmPrologHook -benchtime 50x -count 5 >"$tmp/hook" 2>&1
OMP_NUM_THREADS=1 $GO test ./cmd/scavctl -count 1 -v -run 'TestLostHostRelaunchesOnTheOther' >"$tmp/ssh" 2>&1
$GO test ./launchers/slurm -count 1 -v -run 'TestCluster/Scenarios/Requeue$' >"$tmp/requeue" 2>&1

hook=$(awk '/^BenchmarkSlurmPrologHook/ {printf "%s%.1f", sep, $3/1e6; sep=", "}' "$tmp/hook")
ssh=$(sed -n 's/.*attempt 1 ended \([0-9.]*\)s after the link went down.*/\1/p' "$tmp/ssh")
requeue=$(sed -n 's/.*ran again \([0-9.]*\)s after the requeue.*/\1/p' "$tmp/requeue")
[ -n "$hook" ] && [ -n "$ssh" ] && [ -n "$requeue" ] || { cat "$tmp"/*; echo "bench-ops: a test did not report its figure" >&2; exit 1; }

cat >"$out" <<MD
# Launchers and hooks: measured figures

Made by \`make bench-ops\` (tools/bench-ops.sh) on $(date -u +%Y-%m-%d) on $(nproc) cores, $(uname -r); each figure is
what the named test measures on the real daemons (a private Slurm 22.05, sshd in network namespaces).

| figure | value | goal | measured by |
|---|---|---|---|
| \`scavctl slurm prolog\` from exec to exit, against a running scavd (5 runs of 50) | $hook ms | < 100 ms | \`BenchmarkSlurmPrologHook\` |
| a lost SSH host (link down) to the end of its attempt, default keepalives (2 s, 5 s) | $ssh s | fails fast | \`TestLostHostRelaunchesOnTheOther\` |
| \`scontrol requeue\` of a submitted job to its workers running again (Slurm alone holds it 120 s) | $requeue s | released at once | \`TestCluster/Scenarios/Requeue\` |
MD
cat "$out"
