"""A DDP loop for scavctl's end-to-end tests (no scavenger import).

Each rank writes its PID to $PID_DIR/rank<R>.pid, then all-reduces a tensor
every few milliseconds, forever or for --steps. With --fail-rank R --fail-after N,
rank R exits with --fail-code after N steps while its peers wait in the
collective: the launcher must stop them instead of letting them hang. With
--ignore-term the ranks ignore SIGTERM, as a stuck worker does.
"""

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=0, help="0: forever")
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--fail-after", type=int, default=5)
    p.add_argument("--fail-code", type=int, default=3)
    p.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM (a stuck worker)")
    args = p.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with open(os.path.join(os.environ["PID_DIR"], f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    t = torch.ones(1024)
    step = 0
    while args.steps == 0 or step < args.steps:
        step += 1
        if rank == args.fail_rank and step > args.fail_after:
            print(f"rank {rank} failing with {args.fail_code}", flush=True)
            os._exit(args.fail_code)
        dist.all_reduce(t)
        t.fill_(1.0)
        time.sleep(0.01)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
