#!/bin/sh
# Slurm Prolog and Epilog, by the name it is installed as:
#   scavenger-prolog.sh reports the allocation to this node's scavd, so that
#     the jobs `scavctl run` starts inside it are tied to $SLURM_JOB_ID;
#   scavenger-epilog.sh reports its end, and scavd stops the Scavenger jobs
#     of it that are still running.
#
# Fails open: it always exits 0, because a failing prolog or epilog drains
# the node.
# Whatever goes wrong (scavctl missing or not executable, no log directory,
# no scavd, scavctl failing) is logged to syslog with the tag
# scavenger-prolog or scavenger-epilog (silently skipped where there is no
# logger) and, when the log directory is there, to its slurm-hooks.log.
#
# Install it as README.md ("Running on Slurm") and slurm.conf.scavenger say.
# Slurm runs its hooks with an environment of their own, so change the paths
# here if yours differ:
SCAVCTL=${SCAVCTL:-/usr/local/bin/scavctl}        # the scavctl binary
LOG_DIR=${SCAVENGER_LOG_DIR:-/var/log/scavenger}  # holds slurm-hooks.log
SYSLOG_SOCKET=${SCAVENGER_SYSLOG_SOCKET:-}        # empty: the system's (/dev/log)
case "${0##*/}" in
*prolog*) HOOK=prolog ;;
*epilog*) HOOK=epilog ;;
*) HOOK=hook ;;
esac

# syslog logs its arguments as a warning; it never fails.
syslog() {
	logger -t "scavenger-$HOOK" -p daemon.warning ${SYSLOG_SOCKET:+--socket "$SYSLOG_SOCKET"} \
		-- "job ${SLURM_JOB_ID:-unknown}: $*" >/dev/null 2>&1
	return 0
}

# warn logs its arguments to syslog and to the hook log if it can.
warn() {
	syslog "$*"
	if [ -d "$LOG_DIR" ] && [ -w "$LOG_DIR" ]; then
		printf '%s slurm %s job %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$HOOK" "${SLURM_JOB_ID:-unknown}" "$*" \
			>>"$LOG_DIR/slurm-hooks.log" 2>/dev/null
	fi
	return 0
}

if [ "$HOOK" = hook ]; then
	warn "installed as $0: install it as scavenger-prolog.sh and scavenger-epilog.sh, which say what it does"
	exit 0
fi
if [ ! -f "$SCAVCTL" ] || [ ! -x "$SCAVCTL" ]; then
	warn "$SCAVCTL is missing or not executable, so the allocation is not reported to scavd (ignored: a failing $HOOK would drain the node)"
	exit 0
fi
if [ -d "$LOG_DIR" ] && [ -w "$LOG_DIR" ]; then
	set -- --log "$LOG_DIR/slurm-hooks.log"
else
	syslog "log directory $LOG_DIR is missing or not writable (create it: install -d -m 0750 $LOG_DIR)"
	set --
fi
# scavctl logs to --log itself and says on stderr what went wrong.
err=$("$SCAVCTL" slurm "$HOOK" "$@" 2>&1 >/dev/null)
rc=$?
[ -n "$err" ] && syslog "$err"
[ "$rc" -eq 0 ] || warn "$SCAVCTL slurm $HOOK exited $rc (ignored: a failing $HOOK would drain the node)"
exit 0
