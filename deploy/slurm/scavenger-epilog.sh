#!/bin/sh
# Slurm Epilog: report the end of the allocation to this node's scavd, which
# stops the Scavenger jobs of it that are still running. Always exits 0.
exec /usr/local/bin/scavctl slurm epilog --log /var/log/scavenger/slurm-hooks.log
