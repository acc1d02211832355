// Package jobs owns the jobs of one node: the registry that takes
// submissions, resumptions, stops and moves (and, after a daemon restart,
// settles what the previous daemon left), and one runner per running job.
//
// This is a job's lifecycle: attempts, moves, restarts, recovery after a
// daemon restart (recover.go), the workers' spool, output and cost, and the
// retention of the jobs that ended (retention.go). Deciding
// where a job should run is not: a job under a moving policy has a
// controller (package control) that turns its step records into the
// policy's decisions and hands them to the runner as verdicts. The runner
// acts on them; the controller never writes the record or calls the
// launcher (the runner hands it the launcher's offers and charges).
//
// A runner is a goroutine, and the only writer of its job's record: the
// record is written by record.commit alone, with the bucket revision it last
// saw, so that a write can never carry an older snapshot over a newer one (a
// conflict is an error, not an overwrite). The same commit writes the job's
// summary to the job index (daemon/jobindex) once the record is written.
// Everyone else reaches the job through the runner's channels: the API's
// stop and move requests, the controller's verdicts, pre-emption notices,
// and the daemon's shutdown (a context) and deadline (another).
//
// A job's life, as its runner drives it (the record's state in brackets):
//
//	queued [starting] --runner starts--> starting [starting]
//	   starting --launcher started the workers--> running [running]
//	   starting --could not start--> failed          (a relaunch goes back to
//	                                                  the configuration it left)
//	   running --workers exited--> succeeded | failed
//	   running --move, verdict or pre-emption notice--> checkpointing [running]
//	   checkpointing --rank 0 acked, workers exited--> relaunching [running]
//	   checkpointing --no ack within the grace--> stop; relaunching from the
//	                                              last complete checkpoint
//	   relaunching --> starting (the next attempt, from the checkpoint)
//	   running | checkpointing --stop--> stopping [stopping]
//	   stopping --checkpointed and exited, or killed--> stopped | failed
//	   relaunching --stop arrived meanwhile--> stopped (resume point kept)
//	   running --host lost--> relaunching on the hosts left
//
// A pre-empted job is a job that checkpointed for its scheduler's notice and
// goes on in its next attempt; one its scheduler ended before it could ends
// failed, with its last complete checkpoint as the resume point.
//
// A closing daemon cancels the shutdown context: each runner stops its job
// as a stop request would (or, in a service, leaves an attempt that outlives
// the daemon running for the next daemon to reattach to). Once the longest
// grace is over the kill context is cancelled and what is left is killed;
// every launcher call is bounded by one of the two.
package jobs
