package api

import "encoding/json"

// StepDigest is what a job's step records add up to, as the daemon keeps it
// (daemon/aggregates) and brings up to date for a reader: the reply of
// scav.api.step-digest.
type StepDigest struct {
	Job string `json:"job"`
	// Seq is the step stream's sequence of the newest message folded in.
	Seq uint64 `json:"seq"`
	// Aggregate is a stepstats.Aggregate in its JSON form: package
	// stepstats reads it (api imports no analysis).
	Aggregate json.RawMessage `json:"aggregate"`
}
