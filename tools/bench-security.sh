#!/bin/sh
# Security (issues 11 and 20): every attack of issue 20 with the test that
# tries it as an unprivileged user and what came of it in this run; two
# users' jobs side by side while one floods (tools/benchflood); and what it
# all costs: `scavctl jobs` latency and ingest records/s of this build
# against BASE (default cb44878, the last commit before issue 20's work),
# built in a temporary worktree, both measured in the same run. Writes
# docs/bench-security.md. Run as root (the tests and the flood make users).
# Usage: make bench-security [BASE=rev] [NOTE="what this tree is"]
set -eu
GO=${GO:-go}
PYTHON=${PYTHON:-/usr/bin/python3}
BASE=${BASE:-cb448786f0851884a141155c8e5d6d2b2bda6c16}
out=docs/bench-security.md
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

git worktree add -q --detach "$tmp/base" "$BASE"
(cd "$tmp/base" && $GO build -o "$tmp/old/" ./cmd/scavd ./cmd/scavctl ./tools/benchingest)
$GO build -o "$tmp/new/" ./cmd/scavd ./cmd/scavctl ./tools/benchingest ./tools/benchapi ./tools/benchflood
chmod 755 "$tmp" "$tmp/new" # the tests' users run these scavctl and scavd

# The attacks: "attack|package|tests" (tests: space-separated, each tried
# as an unprivileged user it makes and removes). A row is refused when
# every test of it passed in this run.
cat >"$tmp/rows" <<'ROWS'
1. A worker's symlink as the spool directory: root deleted *.jsonl, *.tmp, *.sending, *.draining in a root-only 0700 directory and in another user's|./daemon/jobs|TestSpoolSymlinkIsNotFollowed
1. A sparse 1 GiB a.jsonl took scavd from 74 MB to 1.1 GB; a FIFO named a.jsonl hung the drain (stop ignored, SIGTERM 70 s)|./daemon/jobs ./internal/userfs|TestSpoolFIFOAndSparseFile TestOpenRefusesWhatIsNotARegularFile
1. --checkpoint-dir swapped for a symlink mid-job: root deleted .*.<pid>.scavtmp in the target|./daemon/jobs|TestCheckpointDirSwappedForASymlink
1. (the means) root acts on a user's files with the user's rights only, on that one thread|./internal/userfs|TestAsTakesTheUsersRights
2. A state directory made first by a user, her nats.nk and telemetry.key in it: NATS as the daemon (others' output, purge SCAV_STEPS), any job's token forged|./daemon ./cmd/scavd|TestPlantedStateDirIsRefused TestCheckConfigRefusesAPlantedStateDir
3. 20,000 follow streams from one user (fd limit, JetStream write errors, every run failing after); the same for connections|./daemon/apiserver|TestConnectionsPerUser TestStreamsPerUser
3. Unauthenticated TCP peers holding keep-alive connections (500 open after 40 s)|./daemon/apiserver|TestIdleConnectionsEnd
3. (issue 21) 20,000 slow request bodies: no body timeout, fd limit, RSS 424-590 MB|./daemon/apiserver|TestSlowBodyIsCut
4. One global cap of 4096 telemetry connections held by one user (another's job had no live steps, could not move) [tel]|./cmd/scavctl ./daemon/ingest|TestTelemetryBoundsPerUser TestConnectionsPerJobBounded
5. User and group lookups cached forever: a user removed from a group kept it; a reused uid ran with the old user's name, home, groups|./daemon/apiserver ./daemon/jobs|TestUsersAreLookedUpAgain TestResumeLooksTheOwnerUpAgain
6. Root's run --resume of a user's job ran it with root's environment (AWS_SECRET_ACCESS_KEY, PATH)|./daemon/jobs|TestRootResumesWithTheOwnersEnvironment
7. 71 jobs of one user printing 4 MB each left another user's logs empty|./daemon/jobs|TestOneUsersOutputLeavesAnothersLogs
7. The step stream, the same shape (step bytes per user) [tel]|./cmd/scavctl|TestTelemetryBoundsPerUser
8. ping and stats returned every running job id to any caller|./daemon/apiserver|TestPingAndStatsNameOnlyTheCallersJobs
8. /metrics gave any local user everyone's job ids, names, loss and steps|./daemon|TestMetricsNameNoJobOnASharedDaemon
8. --checkpoint-dir naming a root-only file and a missing path gave different errors|./daemon/jobs|TestCheckpointDirRefusalsAreWordedAlike
8. A resume manifest's recorded size confirmed a root file's exact size|./daemon/jobs|TestManifestIsReadAsItsOwner
9. ESC and CR in a command printed raw by root's jobs --all and status|./cmd/scavctl|TestUsersAreIsolated TestClean
9. A descriptor open in scavd's parent (a root-only file) inherited by workers; a user's python3 resolved with root's PATH|./daemon|TestWorkersStartAsTheirOwner
9. A user binding the NATS or metrics port first kept root's scavd from starting|./daemon|TestPortTakenByAUser
9. SCAV_JOB_ID of another user's job in one's own process put it in the job's resource figures|./telemetry/host|TestAnotherUsersProcessIsNotTakenForAJob
9. "allocation": "slurm.N" attached a job to another user's Slurm allocation|./daemon/allocs|TestAJobJoinsOnlyItsOwnersAllocation
9. Telemetry tokens never expired: a finished attempt's hello replayed 1000 records [tel]|./cmd/scavctl ./daemon/ingest|TestTelemetryTokenEndsWithItsAttempt TestHelloOfAnEndedAttemptRefused
9. 11,331 token guesses in 5 s, neither limited nor logged [tel]|./cmd/scavctl ./daemon/ingest|TestTelemetryTokenGuessesLimited TestWrongTokensLimited
ROWS
cat >"$tmp/rows21" <<'ROWS'
kill -9 scavd under a job without checkpoints: 232 of 600 records left in the spool, the finished job marked failed|./daemon/jobs|TestRecoverPublishesTheSpoolAndSettlesFinishedJobs
the checkpoint dir full: 317 empty *.jsonl.tmp left; a worker's end recorded in the spool (python client)|python|EndRecordTest
ROWS

# Run every test named, one go test per package, as root, with the e2e
# tests' binaries; keep "name status" lines.
results="$tmp/results"
: >"$results"
for pkg in $(cut -d'|' -f2 "$tmp/rows" "$tmp/rows21" | tr ' ' '\n' | grep -v '^python$' | sort -u); do
	names=$(awk -F'|' -v p="$pkg" '{ n = split($2, ps, " "); for (i = 1; i <= n; i++) if (ps[i] == p) print $3 }' "$tmp/rows" "$tmp/rows21" | tr ' ' '\n' | sort -u | paste -sd'|')
	SCAV_TEST_BIN="$tmp/new" SCAV_TEST_PYTHON="$PYTHON" OMP_NUM_THREADS=1 timeout 1800 $GO test "$pkg" -run "^($names)\$" -count=1 -v 2>&1 |
		sed -n 's/^--- \(PASS\|FAIL\|SKIP\): \([A-Za-z0-9_]*\) .*/\2 \1/p' >>"$results" || true
done
if (cd python && OMP_NUM_THREADS=1 timeout 600 "$PYTHON" -m unittest discover -s tests -p test_client.py -k EndRecord >/dev/null 2>&1); then
	echo "EndRecordTest PASS" >>"$results"
else
	echo "EndRecordTest FAIL" >>"$results"
fi
# table prints one row per line of a rows file, with its tests' results.
table() {
	while IFS='|' read -r what pkgs tests; do
		verdict=refused; shown=""
		for t in $tests; do
			st=$(awk -v t="$t" '$1 == t { print $2 }' "$results" | tail -1)
			case "$st" in
			PASS) ;;
			FAIL) verdict="**NOT REFUSED**" ;;
			SKIP) [ "$verdict" = refused ] && verdict="not tried (skipped)" ;;
			*) st="not in this build"; [ "$verdict" = refused ] && verdict="not tried (test not in this build)" ;;
			esac
			shown="$shown \`$t\` ($(echo "$st" | tr 'A-Z' 'a-z'))"
		done
		echo "| $what | $verdict |$shown (\`$pkgs\`) |"
	done <"$1"
}

flood=$("$tmp/new/benchflood" --scavd "$tmp/new/scavd" --scavctl "$tmp/new/scavctl" --python "$PYTHON") ||
	flood="**benchflood failed** (its errors are on the terminal that ran it): $flood"

api_old=$("$tmp/new/benchapi" --scavd "$tmp/old/scavd" --scavctl "$tmp/old/scavctl" --label "before ($BASE)")
api_new=$("$tmp/new/benchapi" --scavd "$tmp/new/scavd" --scavctl "$tmp/new/scavctl" --label "now: bounds per user, files as their owner")
rate() { "$1/benchingest" --scavd "$1/scavd" | sed -n 's/.*\*\*ingest throughput\*\* | \*\*\([0-9]*\) records\/s.*/\1/p'; }
in_old=""; in_new=""
for i in 1 2 3; do in_old="$in_old $(rate "$tmp/old")"; in_new="$in_new $(rate "$tmp/new")"; done
med() { echo $* | tr ' ' '\n' | sort -n | sed -n 2p; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "-" }'; }
mo=$(echo "$api_old" | awk -F'|' '{ print $4 }'); mn=$(echo "$api_new" | awk -F'|' '{ print $4 }')

cat >"$out" <<MD
# Security: the attacks, side by side, and what it costs (issues 11 and 20)

Made by \`make bench-security\` (tools/bench-security.sh) on $(date -u +%Y-%m-%d) on $(nproc) cores, as root; "before"
is \`$BASE\` (before issue 20) built in a temporary worktree, "now" this tree ($(git log -1 --format=%h)${NOTE:+; $NOTE});
both measured in the same run.

## Issue 20's attacks, each tried by an unprivileged user

Each row is an attack of issue 20 (numbered as there) and the tests that try it in this run as an unprivileged
user they make and remove; "refused" means every one of them passed. Rows marked [tel] are the telemetry
socket's (their tests come with that work: "not in this build" until it is merged).

| attack | result | tests (package) |
|---|---|---|
$(table "$tmp/rows")

Issue 21's spool rows, the same way:

| fault | result | tests |
|---|---|---|
$(table "$tmp/rows21")

## Two users side by side, one flooding (tools/benchflood)

Alice's job steps every 50 ms; mallory opens 20,000 follow streams and sends 20,000 slow request bodies on the
API socket, runs a job that opens 3,000 telemetry connections and writes on them as fast as it can, and two jobs
that print as fast as they can. Alice's latency is her own \`jobs\` calls on her own connection.

$flood

## \`scavctl jobs\` (a process start, the daemon found, the call, 5 jobs listed)

| build | runs | median ms | p90 ms |
|---|---|---|---|
$api_old
$api_new

Median now / before: $(ratio "$mo" "$mn").

## Telemetry ingest (tools/benchingest: 8 writers for 10 s; median of 3 runs)

| build | records/s (runs) | median |
|---|---|---|
| before ($BASE) |$in_old | $(med $in_old) |
| now |$in_new | $(med $in_new) |

Median now / before: $(ratio "$(med $in_old)" "$(med $in_new)").
MD
cat "$out"
