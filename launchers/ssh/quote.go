package ssh

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/scavenger-ml/scavenger/plugins"
)

// Quote returns s as one POSIX shell word: wrapped in single quotes, each
// single quote inside written as quote, backslash, quote, quote (close the
// quoting, an escaped quote, reopen). Nothing inside is expanded by sh.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pgidMarker starts the first stdout line of every remote worker: the
// wrapper's process-group id.
const pgidMarker = "SCAVPGID "

// remoteCommand builds the command line sent in the SSH exec request for
// one worker. The login shell only runs `exec /bin/sh -c '<script>'`; the
// script prints "SCAVPGID <pid>" (sshd makes each session's process a
// session and group leader, so its pid is the pgid the launcher kills),
// changes to dir, and execs env with the worker environment and the
// arguments (through `sh -c 'exec "$@"'` when the program's path has a '=',
// which env would take for an assignment), every one of them single-quoted: no argument, key or value is
// ever parsed by a shell. The contract variables that WorkerEnv leaves out
// (the rank variables in ModeSelf, the batch variables of a job without a
// batch) are unset so that a stale value in the remote login environment
// does not leak in.
func remoteCommand(dir string, env, argv []string) string {
	var b strings.Builder
	b.WriteString(`echo "` + pgidMarker + `$$" || exit 125` + "\n")
	cdTo(&b, dir)
	b.WriteString("exec ")
	envWords(&b, env)
	if len(argv) > 0 && strings.Contains(argv[0], "=") {
		// env takes every NAME=VALUE word before the program as an
		// assignment, "--" or not: a program whose path has a '=' is run
		// by a shell's exec instead, which takes its first word as it is.
		b.WriteString(` /bin/sh -c 'exec "$@"' scav-exec`)
	}
	for _, a := range argv {
		b.WriteString(" " + Quote(a))
	}
	return "exec /bin/sh -c " + Quote(b.String()) + " scav-worker"
}

// cdTo writes the change to the worker's directory (none for "").
func cdTo(b *strings.Builder, dir string) {
	if dir != "" {
		b.WriteString("cd -- " + Quote(dir) + " || exit 127\n")
	}
}

// envWords writes `env -u ... -- K=V...`: the worker's environment, the
// contract variables it leaves out unset.
func envWords(b *strings.Builder, env []string) {
	b.WriteString("env")
	for _, k := range []string{plugins.EnvRank, plugins.EnvWorldSize, plugins.EnvLocalRank, plugins.EnvLocalWorldSize, plugins.EnvGlobalBatch, plugins.EnvLocalBatch} {
		b.WriteString(" -u " + k)
	}
	b.WriteString(" --")
	for _, kv := range env {
		b.WriteString(" " + Quote(kv))
	}
}

// A detached rank (Options.Detach) runs apart from its SSH session, so that
// it outlives the session and the daemon: a wrapper, made a session of its
// own by setsid and carrying the worker environment, writes its pid, runs
// the worker with its output in files and writes its exit status; the
// session only follows the files (GNU tail --pid) and exits with that
// status. Its files are in rankDir on the host: pid, out, err, rc. A
// daemon that restarts reattaches by following them again (Reattach).

// attemptDir is the directory, on a host, of an attempt's detached ranks
// (a shell word: $TMPDIR is the login's, else /tmp).
func attemptDir(job string, attempt int) string {
	return `"${TMPDIR:-/tmp}"/` + Quote(fmt.Sprintf("scav-%s-a%d", jobTag(job), attempt))
}

// rankDir is the directory of rank r in attemptDir base (a shell word).
func rankDir(base string, r int) string { return base + "/rank" + strconv.Itoa(r) }

// rankWrapper is the wrapper's script: $1 is its directory, the rest the
// worker's argv. A stop's signals reach the worker (its process group);
// the wrapper only notes them, and writes the worker's status once it ends.
const rankWrapper = `d=$1; shift
echo $$ >"$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid" || exit 125
trap : TERM INT HUP QUIT USR1 USR2
"$@"
s=$?
echo "$s" >"$d/rc.tmp" && mv "$d/rc.tmp" "$d/rc"`

// detachedCommand starts rank's worker detached in the rank directory of
// base and follows it (see above); it prints "SCAVPGID <pid>" as
// remoteCommand does, the wrapper's pid being its process group's.
func detachedCommand(dir string, env, argv []string, base string, rank int) string {
	var b strings.Builder
	b.WriteString("d=" + rankDir(base, rank) + "\n")
	b.WriteString(`mkdir -p -m 0700 "$d" && rm -f "$d/rc" "$d/pid" && : >"$d/out" && : >"$d/err" || exit 125` + "\n")
	cdTo(&b, dir)
	envWords(&b, env)
	b.WriteString(" setsid /bin/sh -c " + Quote(rankWrapper) + ` scav-rank "$d"`)
	for _, a := range argv {
		b.WriteString(" " + Quote(a))
	}
	b.WriteString(` </dev/null >>"$d/out" 2>>"$d/err" &` + "\n")
	b.WriteString(followScript(true))
	return "exec /bin/sh -c " + Quote(b.String()) + " scav-worker"
}

// followCommand follows rank's files in base from their end (a daemon that
// reattaches gets the output written from then on).
func followCommand(base string, rank int) string {
	return "exec /bin/sh -c " + Quote("d="+rankDir(base, rank)+"\n"+followScript(false)) + " scav-follow"
}

// followScript waits for the pid file in $d, prints the pgid line, streams
// out and err (from their start, or their end) until the wrapper exits,
// and exits with the worker's status (137, SIGKILL's, when the wrapper was
// killed before it could write it).
func followScript(fromStart bool) string {
	from := "-n 0"
	if fromStart {
		from = "-c +1"
	}
	return `n=0; while [ ! -s "$d/pid" ]; do n=$((n+1)); [ "$n" -gt 500 ] && exit 125; sleep 0.02; done
p=$(cat "$d/pid")
echo "` + pgidMarker + `$p" || exit 125
tail ` + from + ` -s 0.2 -F --pid="$p" "$d/err" >&2 &
tail ` + from + ` -s 0.2 -F --pid="$p" "$d/out"
wait
[ -s "$d/rc" ] && exit "$(cat "$d/rc")"
exit 137`
}

// killCommand builds a command that sends sig (a name without "SIG") to
// each process group in pgids, ignoring groups that are already gone.
func killCommand(sig string, pgids []int) string {
	var b strings.Builder
	b.WriteString("for p in")
	for _, p := range pgids {
		b.WriteString(" " + strconv.Itoa(p))
	}
	b.WriteString("; do kill -s " + Quote(sig) + ` -- "-$p" 2>/dev/null; done; exit 0`)
	return b.String()
}

// orphanKillCommand builds a command that SIGKILLs the process group of
// each orphan whose leader is still the orphan's worker: its environment
// has the orphan's SCAV_JOB_ID and SCAV_ATTEMPT (so that a process group id
// reused since then is left alone). A group whose leader is gone is skipped.
func orphanKillCommand(orphans []orphan) string {
	var b strings.Builder
	for _, o := range orphans {
		b.WriteString("e=$(tr '\\0' '\\n' < /proc/" + strconv.Itoa(o.pgid) + "/environ 2>/dev/null) && " +
			`printf '%s\n' "$e" | grep -qxF ` + Quote(plugins.EnvJobID+"="+o.job) + ` && ` +
			`printf '%s\n' "$e" | grep -qxF ` + Quote(plugins.EnvAttempt+"="+strconv.Itoa(o.attempt)) + ` && ` +
			"kill -s KILL -- -" + strconv.Itoa(o.pgid) + " 2>/dev/null\n")
	}
	b.WriteString("exit 0")
	return b.String()
}
