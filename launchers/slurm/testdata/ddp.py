"""Two-line DDP check for the slurm launcher's tests: all-reduce rank+1 over gloo."""
import os

import torch
import torch.distributed as dist

torch.set_num_threads(1)
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
t = torch.ones(4) * (r + 1)
dist.all_reduce(t)
e = os.environ
print(f"rank {r} world {w} local {e['LOCAL_RANK']}/{e['LOCAL_WORLD_SIZE']} sum {t[0].item():g} "
      f"preempt {e.get('SCAV_PREEMPT_SIGNAL')} master {e['MASTER_ADDR']}", flush=True)
dist.destroy_process_group()
