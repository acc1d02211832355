package main

// intro is what the document says before the tables: how it measures.
const intro = `How it measures. Each history is made fast: the bench writes job records (finished jobs of 2 workers, one attempt) or
one job's step records (2 ranks, one record a message, as a per-step writer's records are stored; two attempts) into a
scavd's store through its NATS server, as a daemon would have, then restarts scavd on it (the first start writes the
job index's summaries of records it has none of, as it does once for a store older than the index). Each figure is the
wall time of a scavctl command from exec to exit, its output to /dev/null. The running jobs are real: a python worker
each, reporting 10 steps a second through the python client.

`

// notes is what the document says after the tables: where the figures
// come from.
const notes = `## Where the figures come from

- **Job history.** Listing, filtering, paging and naming a job read the job index (daemon/jobindex): one summary per
  job in the bucket scav_job_index, written by each job's runner right after its record, and watched into each daemon's
  memory. ` + "`scavctl jobs`" + ` lists the newest 100 unless told otherwise (` + "`--limit 0`" + ` every one: it then costs
  what printing them all costs); ` + "`status NAME`" + ` is one call (resolve) whatever the history. A restart reads
  the records of the unfinished jobs only. The first start on a store that predates the index reads every record
  once, to write their summaries: that is the "first start" row. The state directory holds the records, the summaries
  and the streams; retention (job_retention, 90 days; job_history, 10,000 jobs) bounds it, and a job's empty
  checkpoint directory goes when it ends.
- **Step history.** ` + "`steps --summary`" + `, ` + "`report`" + ` (text) and ` + "`top`" + ` read the job's step digest
  (daemon/aggregates: a stepstats.Aggregate of its records, brought up to date and saved every 10 s and at the end):
  what they read is the digest and the records stored since it was saved. The "first read" row is a digest made from
  the whole stream, as for records written behind the daemon's back (the bench's); a job that ran under the daemon
  has one already. ` + "`steps --last N`" + ` starts where the digest's marks say the last N records are.
  ` + "`steps`" + ` in full and ` + "`report --format png`" + ` (whose figures are series along the whole job) read every record: they
  grow with the history by nature.
- **Memory.** VmRSS is the anonymous memory (the heap and the stacks: what scavd allocates) plus the file-backed pages
  of the binary it runs (and of the libraries it links), which are shared, clean and given back under memory pressure.
  The binary grew with the launchers (the cloud providers' SDKs, gRPC for plugins) and so did its file-backed pages:
  the kernel maps the page cache's large folios of an executable whole, so the pages counted follow the binary's size
  more than what scavd runs. The anonymous part grew with the packages' initialisation (the table above) and the job
  index (a summary per job in memory).
`
