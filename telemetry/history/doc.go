// Package history owns the JetStream side of Scavenger's telemetry: the
// streams that hold the history of steps, worker output, job events and
// node samples, the key-value buckets of job records and allocations
// (OpenStore, bounded by a Retention), the job records' journal that a
// damaged job bucket is restored from (journal.go), and how that history is
// replayed to a reader (Replay, ReplayAfter, ReplayLast, ReplaySince,
// FollowSince, LastStepMsg).
// The messages and the subjects they travel on are package telemetry's.
package history
