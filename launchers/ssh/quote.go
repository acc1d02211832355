package ssh

import (
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
	if dir != "" {
		b.WriteString("cd -- " + Quote(dir) + " || exit 127\n")
	}
	b.WriteString("exec env")
	for _, k := range []string{plugins.EnvRank, plugins.EnvWorldSize, plugins.EnvLocalRank, plugins.EnvLocalWorldSize, plugins.EnvGlobalBatch, plugins.EnvLocalBatch} {
		b.WriteString(" -u " + k)
	}
	b.WriteString(" --")
	for _, kv := range env {
		b.WriteString(" " + Quote(kv))
	}
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
