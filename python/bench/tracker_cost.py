"""Where the instrumented step's time goes: the CNN's step under each part of scavenger.torch.

    /usr/bin/python3 python/bench/tracker_cost.py [--rounds 3] [--steps 400] [--workers 2]

One job per round (gloo on CPU, the examples' CNN), in which several copies of
the model take turns step by step, in an order shuffled alike on every rank, so
that all see the same machine:

  plain            DDP as it comes (its built-in C++ all-reduce)
  plain again      a second plain copy: the A/A control, i.e. the noise floor
  python hook      DDP with torch's own python all-reduce hook (default_hooks)
  tracker, norms   scavenger.torch's tracker, reporting to a client that drops
     skipped       the records, with the gradient norms' dot products skipped
  tracker          the same tracker, norms included
  instrumented     the tracker reporting through the real client to a local
                   listener that confirms, as under scavctl

For each copy it prints the median wall time of a step and the median CPU time
of the training thread (time.thread_time) in that step, each against the mean
of the two plain copies (a copy's place in memory alone moves its figures by
up to a percent or so, so one plain copy is a biased reference); the last rows
are the medians over rounds. The CPU column is the
steadier: it leaves out the time a step waits for the other rank and the
machine, but also the client's sender thread (a separate thread). The two
plain rows' distance from each other is the noise floor: a difference smaller
than that is not resolved by this machine.
"""

import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from step_cost import discard_socket  # noqa: E402
from tracker_overhead import EXAMPLES, cnn_copy, run, train_step  # noqa: E402

COPIES = ["plain", "plain again", "python hook", "tracker, norms skipped", "tracker", "instrumented"]


class DropClient:
    """A client that takes the tracker's records and keeps nothing."""

    def step(self, **fields) -> None:
        """Drop the record."""


def worker() -> None:
    """One rank: every copy in turn, then rank 0 prints each copy's medians as JSON."""
    sys.path.insert(0, EXAMPLES)
    import common
    import torch
    import torch.nn.functional as F
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    import scavenger.torch

    args = common.parse_args("tracker cost worker")
    rank, world = common.init_distributed()
    zero = torch.zeros(())
    real_sqr = scavenger.torch._sqr
    copies = []
    for name in COPIES:
        model, opt = cnn_copy(args)
        tracker = scavenger.torch.NoopTracker()
        if name == "python hook":
            model.register_comm_hook(model.process_group, default_hooks.allreduce_hook)
        elif name == "instrumented":
            tracker = scavenger.torch.instrument(model, opt)
        elif name.startswith("tracker"):
            tracker = scavenger.torch.Tracker(model, opt, DropClient())
        sqr = (lambda t: zero) if name == "tracker, norms skipped" else real_sqr
        copies.append((name, model, opt, tracker, sqr, [], []))
    order = random.Random(args.seed)  # the same order on every rank: DDP's collectives must match
    data = common.batches("cnn", args.batch_size // world, args.seed, rank)
    for _, (x, y) in zip(range(args.steps), data):
        order.shuffle(copies)
        for _, model, opt, tracker, sqr, walls, cpus in copies:
            scavenger.torch._sqr = sqr
            wall, cpu = time.perf_counter(), time.thread_time()
            train_step(model, opt, tracker, F.cross_entropy, x, y)
            cpus.append(time.thread_time() - cpu)
            walls.append(time.perf_counter() - wall)
    scavenger.torch._sqr = real_sqr
    if rank == 0:
        out = {name: [statistics.median(w[args.warmup:]), statistics.median(c[args.warmup:])]
               for name, *_, w, c in copies}
        print(json.dumps(out), flush=True)
    torch.distributed.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    with discard_socket() as sock:
        measure(args, sock)


def measure(args: argparse.Namespace, sock: str) -> None:
    """Each round's job, its rows, the medians' rows and the JSON line, with steps sent to sock."""
    ratios = {name: ([], []) for name in COPIES}
    print(f"{'round':<6} {'copy':<24} {'wall ms':>8} {'ratio':>7} {'cpu ms':>8} {'ratio':>7}")
    for i in range(args.rounds):
        got = run(os.path.abspath(__file__), args.workers, args.steps, args.batch_size, sock)
        wall0, cpu0 = ((a + b) / 2 for a, b in zip(got["plain"], got["plain again"]))
        for name in COPIES:
            wall, cpu = got[name]
            ratios[name][0].append(wall / wall0)
            ratios[name][1].append(cpu / cpu0)
            print(f"{i + 1:<6} {name:<24} {wall * 1e3:>8.3f} {wall / wall0:>7.4f} "
                  f"{cpu * 1e3:>8.3f} {cpu / cpu0:>7.4f}", flush=True)
    for name in COPIES:
        wall, cpu = (statistics.median(r) for r in ratios[name])
        print(f"{'median':<6} {name:<24} {'':>8} {wall:>7.4f} {'':>8} {cpu:>7.4f}")
    print(json.dumps({"event": "tracker_cost", "workers": args.workers, "global_batch": args.batch_size,
                      "rounds": args.rounds, "steps": args.steps,
                      "median_ratio": {name: {"wall": round(statistics.median(r[0]), 4),
                                              "cpu": round(statistics.median(r[1]), 4)}
                                       for name, r in ratios.items()}}))


if __name__ == "__main__":
    if "RANK" in os.environ:  # started by run() as one rank
        worker()
    else:
        main()
