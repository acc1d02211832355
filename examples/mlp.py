"""An MLP (512-1024-1024-10) on synthetic vectors, DDP over gloo, reporting to Scavenger.

The batch size comes from Scavenger (SCAV_LOCAL_BATCH) when it sets one, else
from --batch-size (global) split over the workers. The instrumentation is the
lines marked `# scavenger`; without SCAV_SOCKET they do nothing, and
plain_ddp.py is cnn.py without them.

    scavctl run --workers 2 --batch-size 64 -- /usr/bin/python3 examples/mlp.py --steps 50
"""

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import common
import scavenger.torch  # scavenger


def main() -> None:
    args = common.parse_args(__doc__.splitlines()[0])
    rank, world = common.init_distributed()
    local_batch = scavenger.local_batch_size(default=max(1, args.batch_size // world))  # scavenger
    model = DistributedDataParallel(common.make_model("mlp", args.seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    tracker = scavenger.torch.instrument(model, optimizer)  # scavenger
    timer = common.StepTimer()
    data = common.batches("mlp", local_batch, args.seed, rank)
    for _, (x, y) in zip(range(args.steps), data):
        with timer:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            tracker.loss(loss)  # scavenger
            optimizer.step()
    common.finish(args, timer, world, local_batch, loss)


if __name__ == "__main__":
    main()
