#!/bin/sh
# Slurm Prolog: report the allocation to this node's scavd, so that the jobs
# `scavctl run` starts inside it are tied to $SLURM_JOB_ID. Fails open: it
# always exits 0, because a failing prolog drains the node.
exec /usr/local/bin/scavctl slurm prolog --log /var/log/scavenger/slurm-hooks.log
