"""A plain DDP trainer with no Scavenger import: the CNN of cnn.py, uninstrumented.

It reads only torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
so it runs unchanged under torchrun or `scavctl run`. Its loop is cnn.py's
without the instrumentation lines, which makes it the baseline of the
telemetry-overhead figure.

    scavctl run --workers 2 --batch-size 64 -- /usr/bin/python3 examples/plain_ddp.py --steps 50
"""

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import common


def main() -> None:
    args = common.parse_args(__doc__.splitlines()[0])
    rank, world = common.init_distributed()
    local_batch = max(1, args.batch_size // world)
    model = DistributedDataParallel(common.make_model("cnn", args.seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    timer = common.StepTimer()
    data = common.batches("cnn", local_batch, args.seed, rank)
    for _, (x, y) in zip(range(args.steps), data):
        with timer:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
    common.finish(args, timer, world, local_batch, loss)


if __name__ == "__main__":
    main()
