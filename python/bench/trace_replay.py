"""A training job that replays one application's measured traces (shared/traces), time-compressed.

Each rank of the job runs its steps as the traces measured them for its
configuration — the machine type (--type), one node, WORLD_SIZE workers,
the global batch Scavenger gives (SCAV_GLOBAL_BATCH) — and reports them
through the real python client: it sleeps each step's traced step time
divided by the compression --factor, reports that (compressed) step and
sync time, and the gradient norms a worker of its local batch shows at the
job's current point of training (the traces' |G|² and tr Σ, as the
simulator emits them: optimizer/sim). Training progress is the traces'
(scale-invariant, from the validation run at its batch) and the job ends
when it reaches the traces' target, as a simulated job does.

It checkpoints its step and progress when Scavenger asks (rank 0 writes, every
rank acknowledges) and resumes from SCAV_RESTORE. A relaunch costs the
simulator's relaunch penalty (--penalty, compressed): the new attempt waits
until that much time has passed since the last step of the one before, so
that what the machine's load adds to a real relaunch (under the penalty) does
not show. Rank 0 prints the factor it runs at.

    scavctl run --workers 1:8 --batch-size 20:640 --policy scavenger --price 32.77 \\
        --target-samples N -- python3 python/bench/trace_replay.py --traces ../shared/traces \\
        --app deepspeech2 --type dgx-ext --factor 10
"""

import argparse
import bisect
import csv
import glob
import json
import math
import os
import sys
import time

import scavenger

MIN_WALL_STEP_S = 0.001


def read_csv(path: str) -> list:
    """The rows of a CSV file as dicts (read by header name)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class Trace:
    """One application's traces: single-node step times of a type, validation runs."""

    def __init__(self, root: str, app: str, typ: str) -> None:
        d = os.path.join(root, app)
        self.rows = {}  # workers -> sorted [(local, step, sync)] on one node
        placed = set()
        for r in read_csv(os.path.join(d, f"placements-{typ}.csv")):
            p = r["placement"].strip()
            if len(p) != 1:
                continue  # one node only
            k = int(p)
            placed.add(k)
            self.rows.setdefault(k, []).append((float(r["local_bsz"]), float(r["step_time"]), float(r["sync_time"])))
        scal = os.path.join(d, f"scalability-{typ}.csv")
        if os.path.exists(scal):
            for r in read_csv(scal):
                k = int(r["num_replicas"])
                if int(r["num_nodes"]) == 1 and k not in placed:
                    self.rows.setdefault(k, []).append((float(r["local_bsz"]), float(r["step_time"]), float(r["sync_time"])))
        for k, rs in self.rows.items():
            self.rows[k] = dedupe(rs)
        self.vals = {}  # batch -> [(progress, iteration, grad_sqr, grad_var)]
        for path in glob.glob(os.path.join(d, "validation-*.csv")):
            b = int(os.path.basename(path)[len("validation-"):-len(".csv")])
            self.vals[b] = [(float(r["progress"]), float(r["iteration"]), float(r["grad_sqr"]), float(r["grad_var"]))
                            for r in read_csv(path)]
        self.m0 = float(min(self.vals))
        self.target = min(v[-1][0] for v in self.vals.values())

    def step_time(self, workers: int, local: float) -> tuple:
        """Step and sync time (s), interpolated in local batch; below the smallest measured, the
        smallest's; beyond the largest, no more time per sample than there (optimizer/sim)."""
        rs = self.rows[workers]
        if local <= rs[0][0]:
            return rs[0][1], rs[0][2]
        for a, b in zip(rs, rs[1:]):
            if local <= b[0]:
                f = (local - a[0]) / (b[0] - a[0])
                return a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2])
        last = rs[-1]
        return last[1] * local / last[0], last[2]

    def segment(self, batch: int, p: float) -> tuple:
        """Progress per step at progress p of the run at batch, and its segment's end."""
        prev_p, prev_i = 0.0, 0.0
        for prog, it, _, _ in self.vals[batch]:
            if prog > p:
                return (prog - prev_p) / (it - prev_i), prog
            prev_p, prev_i = prog, it
        return 0.0, self.vals[batch][-1][0]

    def advance(self, batch: int, p: float) -> float:
        """Progress after one step from p (a step across a segment's end goes on at the next's rate)."""
        left = 1.0
        while left > 0 and p < self.target:
            rate, end = self.segment(batch, p)
            if rate <= 0:
                break
            goal = min(end, self.target)
            need = (goal - p) / rate
            if need > left:
                return p + left * rate
            left -= need
            p = goal
        return p

    def grad(self, batch: int, p: float) -> tuple:
        """|G|² and tr Σ at progress p (geometric between segment midpoints, as optimizer/sim)."""
        rows = self.vals[batch]
        mids, prev = [], 0.0
        for r in rows:
            mids.append((prev + r[0]) / 2)
            prev = r[0]
        if p <= mids[0]:
            if len(rows) < 2 or not mids[1] > mids[0]:
                return rows[0][2], rows[0][3]
            f = (max(p, 0) - mids[0]) / (mids[1] - mids[0])
            return geo(rows[0][2], rows[1][2], f), geo(rows[0][3], rows[1][3], f)
        i = bisect.bisect_left(mids, p)
        if i >= len(rows):
            return rows[-1][2], rows[-1][3]
        f = (p - mids[i - 1]) / (mids[i] - mids[i - 1])
        return geo(rows[i - 1][2], rows[i][2], f), geo(rows[i - 1][3], rows[i][3], f)


def dedupe(rs: list) -> list:
    """Rows sorted by local batch, equal local batches averaged."""
    by = {}
    for local, step, sync in rs:
        by.setdefault(local, []).append((step, sync))
    return [(l, sum(s for s, _ in v) / len(v), sum(y for _, y in v) / len(v)) for l, v in sorted(by.items())]


def geo(a: float, b: float, f: float) -> float:
    """Geometric interpolation (linear when either is not positive, floored at 0)."""
    if a <= 0 or b <= 0:
        return max(a + f * (b - a), 0.0)
    return math.exp(math.log(a) + f * (math.log(b) - math.log(a)))


def norms(sqr: float, var: float, m0: float, local: int, workers: int) -> dict:
    """The gradient norms a step reports at local batch (the expected ones: gns.Expected)."""
    if workers <= 1:
        return {"local_sqr": sqr + var * m0 / local, "avg_sqr": sqr + var * m0 / (2 * local), "count": 2, "biased": True}
    return {"local_sqr": sqr + var * m0 / local, "avg_sqr": sqr + var * m0 / (local * workers), "count": workers}


def main() -> None:
    """Replay the traces from where the last attempt left off until the target or a checkpoint request."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", required=True, help="the traces' directory (shared/traces)")
    p.add_argument("--app", required=True, help="the application (cifar10, bert, deepspeech2, ncf)")
    p.add_argument("--type", required=True, help="the machine type's trace suffix (aws, azure, dgx-ext)")
    p.add_argument("--factor", type=float, default=10.0, help="time compression: a traced second lasts 1/factor s")
    p.add_argument("--penalty", type=float, default=30.0, help="a relaunch's cost in traced seconds")
    args = p.parse_args()
    trace = Trace(args.traces, args.app, args.type)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    batch = scavenger.global_batch_size()
    local = batch // world
    if world not in trace.rows or batch not in trace.vals:
        sys.exit(f"trace_replay: {args.app} on {args.type} has no single-node placement of {world} workers or no run at batch {batch}")
    st, sync = trace.step_time(world, float(local))
    step, progress = scavenger.start_step(), 0.0
    if scavenger.restore_path():
        with open(scavenger.restore_path()) as f:
            saved = json.load(f)
        step, progress = saved["step"], saved["progress"]
        # The relaunch costs the penalty: what the real one took counts in it.
        time.sleep(max(args.penalty / args.factor - (time.time() - saved["last_step_t"]), 0))
    if rank == 0:
        print(json.dumps({"event": "trace_replay", "app": args.app, "type": args.type, "factor": args.factor,
                          "workers": world, "batch": batch, "traced_step_s": st, "step": step, "progress": progress}), flush=True)
    last_t = time.time()
    # Steps end on a schedule, one every traced step time over the factor
    # (no faster than a thousand a second: a real job's records never come
    # faster; the reported step time stays the traced one): what this
    # process's own work and the machine's load add to a step comes out of
    # its sleep, so that the steps' pace, which the daemon reads off their
    # times, is the traced one.
    wall_step = max(st / args.factor, MIN_WALL_STEP_S)
    due = time.monotonic()
    while progress < trace.target * (1 - 1e-12) and not scavenger.should_checkpoint():
        due += wall_step
        time.sleep(max(due - time.monotonic(), 0))
        progress = min(trace.advance(batch, progress), trace.target)
        step += 1
        sqr, var = trace.grad(batch, progress)
        scavenger.step(samples=local, dt=st / args.factor, sync_s=sync / args.factor, local_batch=local,
                       global_batch=batch, **norms(sqr, var, trace.m0, local, world))
        last_t = time.time()
    saved = None
    if scavenger.checkpoint_dir() and rank == 0:
        saved = os.path.join(scavenger.checkpoint_dir(), f"replay-{step}.json")
        with open(saved + ".tmp", "w") as f:
            json.dump({"step": step, "progress": progress, "last_step_t": last_t}, f)
        os.replace(saved + ".tmp", saved)
    scavenger.acknowledge(saved)
    scavenger.close()


if __name__ == "__main__":
    main()
