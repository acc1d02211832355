"""Telemetry overhead on a real DDP job: the CNN example with and without scavenger.torch.

    /usr/bin/python3 python/bench/tracker_overhead.py [--pairs 5] [--steps 60] [--workers 2]

Two measurements, both with gloo on CPU and every step reported to a local
listener, as under scavctl (the goal is a ratio <= 1.005):

1. examples: examples/cnn.py (instrumented) against examples/plain_ddp.py (the
   same CNN and batches, no Scavenger code), in alternating runs so that drift of
   the machine hits both alike. Each run's figure is rank 0's median step time
   after warm-up; ratio = median(instrumented) / median(plain). Between
   processes this is only as precise as the machine is quiet.
2. interleaved: within one job, two copies of the CNN, one instrumented, take
   turns step by step (order alternating), so both see the same machine;
   ratio = median step of the instrumented copy / median step of the plain one.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from step_cost import discard_socket  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(script: str, workers: int, steps: int, batch: int, sock: str) -> dict:
    """Run script as ranks 0..workers-1 with Scavenger's environment; rank 0's last JSON line."""
    port = str(free_port())
    procs = []
    for rank in range(workers):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(workers), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(workers), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   SCAV_SOCKET=sock, SCAV_JOB_ID="overhead", SCAV_ATTEMPT="1",
                   SCAV_GLOBAL_BATCH=str(batch), SCAV_LOCAL_BATCH=str(batch // workers),
                   PYTHONPATH=PYTHON_DIR)
        procs.append(subprocess.Popen(
            [sys.executable, script, "--steps", str(steps), "--batch-size", str(batch),
             "--warmup", "5"],
            env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"{script} failed: {[p.returncode for p in procs]}")
    return json.loads(outs[0].strip().splitlines()[-1])


def cnn_copy(args) -> tuple:
    """A copy of the examples' CNN under DDP and its optimizer, as the examples make them
    (in a rank whose sys.path has EXAMPLES and whose process group is up)."""
    import common
    import torch
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(common.make_model("cnn", args.seed))
    return model, torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)


def train_step(model, opt, tracker, loss_fn, x, y) -> None:
    """One optimizer step of a copy on the batch (x, y), its loss given to tracker."""
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    tracker.loss(loss)
    opt.step()


def interleaved_worker() -> None:
    """One rank of measurement 2 (run by run() with this file as the script)."""
    sys.path.insert(0, EXAMPLES)
    import common
    import torch
    import torch.nn.functional as F

    import scavenger.torch

    args = common.parse_args("interleaved overhead worker")
    rank, world = common.init_distributed()
    local_batch = args.batch_size // world
    pairs = []
    for instrumented in (False, True):
        model, opt = cnn_copy(args)
        tracker = (scavenger.torch.instrument(model, opt) if instrumented
                   else scavenger.torch.NoopTracker())
        pairs.append((model, opt, tracker, common.StepTimer()))
    data = common.batches("cnn", local_batch, args.seed, rank)
    for i, (x, y) in zip(range(args.steps), data):
        for model, opt, tracker, timer in (pairs if i % 2 else pairs[::-1]):
            with timer:
                train_step(model, opt, tracker, F.cross_entropy, x, y)
    if rank == 0:
        plain, instr = (t.median(args.warmup) for *_, t in pairs)
        print(json.dumps({"plain_s": plain, "instrumented_s": instr}), flush=True)
    torch.distributed.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--interleaved-steps", type=int, default=300)
    args = p.parse_args()
    with discard_socket() as sock:
        measure(args, sock)


def measure(args: argparse.Namespace, sock: str) -> None:
    """Both measurements, their table and their JSON line, with steps sent to sock."""
    plain, instrumented = [], []
    print(f"{'run':<12} {'plain ms':>9} {'instr ms':>9} {'ratio':>6}")
    for i in range(args.pairs):
        for script, out in (("plain_ddp.py", plain), ("cnn.py", instrumented)):
            out.append(run(os.path.join(EXAMPLES, script), args.workers, args.steps,
                           args.batch_size, sock)["median_step_s"])
        print(f"{'examples ' + str(i + 1):<12} {plain[-1] * 1e3:>9.3f} "
              f"{instrumented[-1] * 1e3:>9.3f} {instrumented[-1] / plain[-1]:>6.3f}", flush=True)
    both = run(os.path.abspath(__file__), args.workers, args.interleaved_steps, args.batch_size,
               sock)
    print(f"{'interleaved':<12} {both['plain_s'] * 1e3:>9.3f} {both['instrumented_s'] * 1e3:>9.3f} "
          f"{both['instrumented_s'] / both['plain_s']:>6.3f}")
    print(json.dumps({
        "event": "overhead", "workers": args.workers, "global_batch": args.batch_size,
        "examples": {"pairs": args.pairs, "steps": args.steps,
                     "plain_median_s": statistics.median(plain),
                     "instrumented_median_s": statistics.median(instrumented),
                     "ratio": round(statistics.median(instrumented) / statistics.median(plain), 4)},
        "interleaved": {"steps": args.interleaved_steps, **both,
                        "ratio": round(both["instrumented_s"] / both["plain_s"], 4)},
        "goal": 1.005}))


if __name__ == "__main__":
    if "RANK" in os.environ:  # started by run() as one rank of measurement 2
        interleaved_worker()
    else:
        main()
