#!/bin/bash
# bench-restart: a worker killed with SIGKILL mid-job, restarted by
# `scavctl run --max-restarts` and by torchrun's own elastic restart
# (`--max_restarts`, at its default monitor interval and at 0.5 s), the same
# DDP script (tools/restartbench/worker.py: gloo, CPU, resumes from its own
# newest checkpoint either way). Times, N times each, the kill to the next
# completed step of the restarted workers; prints a markdown table.
#
#   N=5 PYTHON=/usr/bin/python3 BIN=bin tools/bench-restart.sh
set -euo pipefail
N=${N:-5}
PY=${PYTHON:-/usr/bin/python3}
BIN=${BIN:-bin}
KILL_AT=${KILL_AT:-60} # rank 1 is killed once it has done this many steps
tmp=$(mktemp -d /tmp/bench-restart-XXXXXX)
launched=""
cleanup() {
	for p in $launched; do kill -9 -- "-$p" 2>/dev/null || true; done
	for p in $launched; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

# await prints the first line of file that awk program prog matches, within 120 s.
await() {
	local file=$1 prog=$2 line
	for _ in $(seq 2400); do
		if line=$(awk "$prog" "$file" 2>/dev/null | head -1) && [ -n "$line" ]; then
			echo "$line"
			return 0
		fi
		sleep 0.05
	done
	echo "bench-restart: nothing in $file matched $prog in 120 s" >&2
	return 1
}

# trial runs one launcher once and prints "seconds exit_code".
trial() {
	local how=$1 d="$tmp/$1-$2" port
	mkdir -p "$d/ckpt"
	: >"$d/steps"
	port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	local worker=(tools/restartbench/worker.py --dir "$d/ckpt" --steps 300)
	case $how in
	scavctl) set -- "$BIN/scavctl" --state-dir "$d/state" run --name restart --workers 2 --max-restarts 3 -- "$PY" "${worker[@]}" ;;
	torchrun) set -- "$PY" -m torch.distributed.run --nproc_per_node 2 --max_restarts 3 --master_port "$port" --log_dir "$d/torchlogs" --redirects 2 --tee 2 "${worker[@]}" ;;
	torchrun-0.5s) set -- "$PY" -m torch.distributed.run --nproc_per_node 2 --max_restarts 3 --monitor_interval 0.5 --master_port "$port" --log_dir "$d/torchlogs" --redirects 2 --tee 2 "${worker[@]}" ;;
	esac
	BENCH_STEPS="$d/steps" OMP_NUM_THREADS=1 setsid "$@" >"$d/log" 2>&1 &
	local pid=$!
	launched="$launched $pid"
	local victim
	victim=$(await "$d/steps" "\$1 == 1 && \$2 >= $KILL_AT { print \$4 }")
	local before t0
	before=$(awk '{ print $4 }' "$d/steps" | sort -u | tr '\n' ' ')
	t0=$(date +%s.%N)
	kill -9 "$victim"
	local next
	next=$(await "$d/steps" "BEGIN { split(\"$before\", b, \" \"); for (i in b) old[b[i]] = 1 } \$3 > $t0 && !(\$4 in old) { print \$3 }")
	local code=0
	wait "$pid" || code=$?
	launched=${launched/ $pid/}
	awk -v a="$t0" -v b="$next" -v c="$code" 'BEGIN { printf "%.2f %d\n", b - a, c }'
}

echo "| launcher | runs | kill → next completed step, median s (min–max) | each | exit codes |"
echo "|---|---|---|---|---|"
for how in scavctl torchrun torchrun-0.5s; do
	times=() codes=()
	for i in $(seq "$N"); do
		read -r s c < <(trial "$how" "$i")
		times+=("$s") codes+=("$c")
	done
	sorted=$(printf '%s\n' "${times[@]}" | sort -n)
	median=$(echo "$sorted" | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
	label=$how
	case $how in
	scavctl) label="scavctl run --max-restarts 3" ;;
	torchrun) label="torchrun --max_restarts 3 (monitor interval: its default, 5 s)" ;;
	torchrun-0.5s) label="torchrun --max_restarts 3 --monitor_interval 0.5" ;;
	esac
	echo "| $label | $N | **$median** ($(echo "$sorted" | head -1)–$(echo "$sorted" | tail -1)) | ${times[*]} | ${codes[*]} |"
done
