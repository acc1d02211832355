#!/bin/sh
# A one-node Slurm cluster on this host, for development and for README.md's
# batch script on a machine without a cluster (`make slurm-dev`, as root):
#
#   deploy/slurm/dev-cluster.sh start    munged, slurmctld and slurmd, configured
#                                        in /etc/slurm/slurm.conf; then `sbatch job.sh`
#   deploy/slurm/dev-cluster.sh stop     shuts them down, removes what start wrote
#   deploy/slurm/dev-cluster.sh status   says whether it runs
#
# The node is "localhost" with SCAV_SLURM_DEV_CPUS CPUs (default 8: more
# than the machine has is fine, SlurmdParameters=config_overrides), in the
# partition "debug"; munge runs on a key and socket of its own, so the
# host's munge (if any) is left alone. It is the cluster internal/testslurm
# runs for the tests, as a service of this host rather than children of a
# test, and TestSlurmReadmeBatchScript starts it with this script.
#
# It never overwrites a slurm.conf it did not write: on a host that has one,
# use that cluster (or set SLURM_CONF to another path, and export it for
# sbatch). Other places and ports: SLURM_CONF (the configuration),
# SCAV_SLURM_DEV_DIR (state, spool, logs, munge; default
# /var/lib/scavenger-slurm-dev), SCAV_SLURM_DEV_PORTS ("slurmctld slurmd",
# default "6817 6818").
set -eu

CONF=${SLURM_CONF:-/etc/slurm/slurm.conf}
DIR=${SCAV_SLURM_DEV_DIR:-/var/lib/scavenger-slurm-dev}
CPUS=${SCAV_SLURM_DEV_CPUS:-8}
set -- "${1:-}" ${SCAV_SLURM_DEV_PORTS:-6817 6818}
CMD=$1 CTLD_PORT=$2 SLURMD_PORT=$3
MARK="# Written by scavenger's deploy/slurm/dev-cluster.sh; its stop removes it."
APT="apt-get install -y slurm-wlm munge"
export SLURM_CONF="$CONF"

say() { echo "slurm-dev: $*"; }
die() { echo "slurm-dev: $*" >&2; exit 1; }

# alive reports whether the process of pid file $1 runs.
alive() { [ -s "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }

ours() { [ -f "$CONF" ] && grep -qxF "$MARK" "$CONF"; }

conf() {
	cat <<EOF
$MARK
ClusterName=scavdev
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge.sock
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
PrologFlags=Alloc
KillWait=2
MinJobAge=300
SchedulerParameters=sched_interval=1
NodeName=localhost CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

start() {
	[ "$(id -u)" = 0 ] || die "needs root (Slurm's daemons run as root here): sudo $0 start"
	for d in /usr/sbin/munged /usr/sbin/slurmctld /usr/sbin/slurmd; do
		[ -x "$d" ] || die "$d is missing: $APT"
	done
	command -v sinfo >/dev/null || die "sinfo is missing: $APT"
	if [ -e "$CONF" ] && ! ours; then
		die "$CONF is there already, and this script did not write it: this host has a Slurm configuration; use that cluster, or set SLURM_CONF to another path (and export it for sbatch)"
	fi
	if alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid"; then
		say "running already ($CONF)"
		return
	fi
	mkdir -p "$DIR/state" "$DIR/spool" "$(dirname "$CONF")"
	chmod 0700 "$DIR"
	umask 077
	head -c 1024 /dev/urandom >"$DIR/munge.key"
	umask 022
	conf >"$CONF"
	/usr/sbin/munged --force --socket="$DIR/munge.sock" --key-file="$DIR/munge.key" \
		--pid-file="$DIR/munged.pid" --seed-file="$DIR/munged.seed" --log-file="$DIR/munged.log" --num-threads=2
	/usr/sbin/slurmctld -i -f "$CONF"
	/usr/sbin/slurmd -N localhost -f "$CONF"
	i=0
	until sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; do
		i=$((i + 1))
		if [ "$i" -gt 300 ]; then
			tail -n 20 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
			die "the node did not come up within 30 s (logs above, in $DIR)"
		fi
		sleep 0.1
	done
	say "up: node localhost ($CPUS CPUs), partition debug; configuration $CONF, state and logs in $DIR"
	[ "$CONF" = /etc/slurm/slurm.conf ] || say "the Slurm commands need: export SLURM_CONF=$CONF"
	say "stop it with: $0 stop (make slurm-dev-stop)"
}

# await waits (15 s at most) until the process of pid file $1 has gone.
await() {
	i=0
	while alive "$1" && [ "$i" -lt 150 ]; do
		i=$((i + 1))
		sleep 0.1
	done
}

stop() {
	if [ -f "$CONF" ] && ! ours; then
		die "$CONF is not this script's: left alone"
	fi
	if alive "$DIR/slurmctld.pid" || alive "$DIR/slurmd.pid"; then
		jobs=$(squeue -h -o %i 2>/dev/null || true)
		[ -z "$jobs" ] || scancel $jobs 2>/dev/null || true
		scontrol shutdown >/dev/null 2>&1 || true
		await "$DIR/slurmctld.pid"
		await "$DIR/slurmd.pid"
	fi
	for p in slurmctld slurmd munged; do
		if alive "$DIR/$p.pid"; then
			kill "$(cat "$DIR/$p.pid")" 2>/dev/null || true
			await "$DIR/$p.pid"
		fi
	done
	rm -f "$CONF"
	rm -rf "$DIR"
	say "stopped; $CONF and $DIR removed"
}

status() {
	if alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid"; then
		say "running ($CONF): $(sinfo -h -o '%N %T %C' 2>/dev/null || echo 'sinfo failed')"
	else
		say "not running"
		return 1
	fi
}

case "$CMD" in
start) start ;;
stop) stop ;;
status) status ;;
*) die "usage: $0 start|stop|status" ;;
esac
