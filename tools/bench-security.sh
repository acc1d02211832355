#!/bin/sh
# The cost of authentication (issue 11): `scavctl jobs` latency and ingest
# records/s of this build against BASE (default: 520f806, the last commit before the
# API moved behind identity), built in a temporary worktree; writes
# docs/bench-security.md. Usage: make bench-security [BASE=rev]
set -eu
GO=${GO:-go}
BASE=${BASE:-520f806deb4d7412285a8dcf7aa6a49308185a8c}
out=docs/bench-security.md
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

git worktree add -q --detach "$tmp/base" "$BASE"
(cd "$tmp/base" && $GO build -o "$tmp/old/" ./cmd/scavd ./cmd/scavctl ./tools/benchingest)
$GO build -o "$tmp/new/" ./cmd/scavd ./cmd/scavctl ./tools/benchingest ./tools/benchapi

api_old=$("$tmp/new/benchapi" --scavd "$tmp/old/scavd" --scavctl "$tmp/old/scavctl" --label "before ($BASE): NATS request/reply, anonymous")
api_new=$("$tmp/new/benchapi" --scavd "$tmp/new/scavd" --scavctl "$tmp/new/scavctl" --label "now: HTTP on the unix socket, peer credentials")
rate() { "$1/benchingest" --scavd "$1/scavd" | sed -n 's/.*\*\*ingest throughput\*\* | \*\*\([0-9]*\) records\/s.*/\1/p'; }
in_old=""; in_new=""
for i in 1 2 3; do in_old="$in_old $(rate "$tmp/old")"; in_new="$in_new $(rate "$tmp/new")"; done
med() { echo $* | tr ' ' '\n' | sort -n | sed -n 2p; }

cat >"$out" <<MD
# Authentication: what it costs (issue 11)

Made by \`make bench-security\` (tools/bench-security.sh) on $(date -u +%Y-%m-%d) on $(nproc) cores; "before" is
\`$BASE\` built in a temporary worktree, "now" this tree; both measured in the same run.

## \`scavctl jobs\` (a process start, the daemon found, the call, 5 jobs listed)

| build | runs | median ms | p90 ms |
|---|---|---|---|
$api_old
$api_new

## Telemetry ingest (tools/benchingest: 8 writers for 10 s; median of 3 runs)

| build | records/s (runs) | median |
|---|---|---|
| before ($BASE): records of any job on any connection |$in_old | $(med $in_old) |
| now: each connection bound to its attempt by the hello's token, every record checked |$in_new | $(med $in_new) |
MD
cat "$out"
