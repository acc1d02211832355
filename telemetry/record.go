// Package telemetry owns Scavenger's wire messages and where they travel: the
// versioned step record that workers write to the node daemon's unix socket,
// the output lines, events, control messages and node samples the daemon
// publishes, and the names of the NATS subjects, streams and buckets built
// from job and node names. It needs the standard library only, so that a
// client of the API decodes what it receives without NATS; the streams
// themselves and the replay of their history are package telemetry/history's.
// It knows messages, not jobs' lifecycles.
package telemetry

import (
	"bytes"
	"fmt"
	"math"
)

// SchemaVersion is the version of StepRecord this build writes and accepts.
const SchemaVersion = 1

// MaxRecordBytes is the longest step-record line accepted, newline excluded.
// A real record is a few hundred bytes; anything longer is dropped as oversized.
const MaxRecordBytes = 16 << 10

// StepRecord is one line a worker writes on the node daemon's socket: most
// lines are steps (one optimizer step of one worker); a few are control
// messages told apart by Kind. Optional numbers are pointers so that "absent"
// differs from zero. Unknown fields are ignored.
type StepRecord struct {
	// V is the schema version; it must equal SchemaVersion.
	V int `json:"v"`
	// Kind is empty (or KindStep) for a step; KindHello, KindAck,
	// KindPreempt and KindEnd are control messages.
	Kind string `json:"kind,omitempty"`
	// Job is the job id (SCAV_JOB_ID).
	Job string `json:"job"`
	// Attempt counts launches of the job, from 1 (SCAV_ATTEMPT).
	Attempt int `json:"attempt"`
	// Rank is the worker's global rank, 0 <= Rank < World.
	Rank int `json:"rank"`
	// World is the number of workers in this attempt.
	World int `json:"world"`
	// Step is the job's global optimizer-step number, from 1, continuous across attempts.
	Step int64 `json:"step"`
	// Time is the wall-clock time at the end of the step, in Unix seconds.
	Time float64 `json:"t"`
	// Seconds is the wall time of the step (0 when unknown).
	Seconds float64 `json:"dt,omitempty"`
	// Samples is the number of samples this worker processed in the step.
	Samples int `json:"samples,omitempty"`
	// LocalBatch and GlobalBatch are the batch sizes the step ran with.
	LocalBatch  int `json:"local_batch,omitempty"`
	GlobalBatch int `json:"global_batch,omitempty"`
	// Micro is the number of micro-batches accumulated into the step (>= 1).
	Micro int `json:"micro,omitempty"`
	// ComputeSeconds and SyncSeconds split the step: time computing and time in all-reduce.
	ComputeSeconds *float64 `json:"compute_s,omitempty"`
	SyncSeconds    *float64 `json:"sync_s,omitempty"`
	// Loss is the training loss the worker saw in this step. It may be NaN
	// or infinite (a diverged run): JSON has no such numbers, so on the wire
	// they are the strings "NaN", "Infinity" and "-Infinity" (loss.go).
	Loss *float64 `json:"loss,omitempty"`
	// LocalSqr is the squared L2 norm of this worker's gradient before all-reduce;
	// AvgSqr that of the averaged gradient after it. They feed the gradient noise scale.
	LocalSqr *float64 `json:"local_sqr,omitempty"`
	AvgSqr   *float64 `json:"avg_sqr,omitempty"`
	// Count is the number of independent gradients averaged into AvgSqr
	// (default World); Biased marks norms from the single-worker difference
	// estimator (two consecutive steps' gradients, taken at different weights).
	Count  int  `json:"count,omitempty"`
	Biased bool `json:"biased,omitempty"`
	// Epoch is the data epoch the step belongs to, when the script knows it.
	Epoch *int `json:"epoch,omitempty"`
	// From says where a step came from: empty when the worker reported it,
	// FromOutput when the daemon read it off the worker's progress output.
	From string `json:"from,omitempty"`
	// ID is, in an ack, the id of the Control message acknowledged; in a
	// preempt, the name of the signal received.
	ID string `json:"id,omitempty"`
	// Checkpoint is, in an ack from the rank that wrote it, the checkpoint's path.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Total is the total steps the job will run, when it says (the
	// progress bar a script without the client prints).
	Total int64 `json:"total,omitempty"`
	// Token is, in a hello, the attempt's token (SCAV_TOKEN): it binds the
	// connection to the job and attempt the hello names.
	Token string `json:"token,omitempty"`
	// Confirm, in a hello, asks the daemon to confirm on the connection
	// which lines it is done with (a ControlStored message), so that the
	// worker keeps every step record until it is stored and sends the rest
	// again on its next connection.
	Confirm bool `json:"confirm,omitempty"`
	// Session is, in a hello, the worker's own id for its client (one a
	// process, from [A-Za-z0-9_-], at most 64 characters): a record the
	// client sends again on a new connection (the daemon stalled, the
	// write timed out) carries the same session and step as before, and the
	// daemon stores it once.
	Session string `json:"session,omitempty"`
	// ExitCode is, in an end record, the exit status the worker's
	// interpreter was leaving with.
	ExitCode *int `json:"code,omitempty"`
}

// Bounds of a record's values that no job can pass, whatever it runs;
// those the job's attempt sets (its workers, its age) the daemon checks
// on top (daemon/ingest).
const (
	// MaxStep is the largest step (and total): 2^53-1, the largest integer
	// every JSON reader (a float64) holds exactly.
	MaxStep = 1<<53 - 1
	// MaxWorld is the most workers a record may name.
	MaxWorld = 1 << 20
	// MaxTime is the latest Unix time a record may carry (2^33 s: the
	// year 2242).
	MaxTime = 1 << 33
	// MaxSeconds bounds a step's durations (dt, compute_s, sync_s): about
	// three years.
	MaxSeconds = 1e8
)

// Kinds of worker message.
const (
	// KindStep is an optimizer step (also written as no kind at all).
	KindStep = "step"
	// KindHello announces a worker when it connects, before its first step,
	// so that the daemon can reach it with Control messages at once.
	KindHello = "hello"
	// KindAck acknowledges a Control message; Step is the last step the
	// worker completed, Checkpoint the file rank 0 wrote.
	KindAck = "ack"
	// KindPreempt tells that the worker received the scheduler's pre-emption
	// signal (SCAV_PREEMPT_SIGNAL, named in ID); Step is its last step done.
	KindPreempt = "preempt"
	// KindEnd is the last record of a worker that ended while no daemon
	// answered: written to the spool, never to the socket, it tells the
	// daemon that drains the spool how the worker ended (ExitCode), so
	// that a job that finished while its daemon was down is not taken
	// for one that died with it.
	KindEnd = "end"
)

// FromOutput marks steps the daemon derived from a job's output (tqdm bars,
// "step N" lines, a --step-regex) for jobs that do not use the python client.
const FromOutput = "output"

// IsStep reports whether the record is a step rather than a control message.
func (r *StepRecord) IsStep() bool { return r.Kind == "" || r.Kind == KindStep }

// DecodeError says why a step-record line was rejected. Kind is one of the
// Drop* constants so that the ingest counters can group rejections.
type DecodeError struct {
	Kind   string
	Detail string
}

// Error implements error.
func (e *DecodeError) Error() string { return e.Kind + ": " + e.Detail }

// Reasons a step-record line is dropped; they label the ingest counters.
const (
	DropOversized = "oversized"
	DropMalformed = "malformed"
	DropVersion   = "unknown_version"
	DropInvalid   = "invalid"
)

// DecodeStep parses and validates one step-record line (without its newline).
// It never panics; every rejection is a *DecodeError.
func DecodeStep(line []byte) (StepRecord, error) {
	var d flatDecoder
	return d.step(line)
}

// step is DecodeStep with d's state.
func (d *flatDecoder) step(line []byte) (StepRecord, error) {
	var r StepRecord
	if len(line) > MaxRecordBytes {
		return r, &DecodeError{DropOversized, fmt.Sprintf("record of %d bytes exceeds %d", len(line), MaxRecordBytes)}
	}
	line = bytes.TrimSpace(line)
	if err := d.unmarshal(line, &r); err != nil {
		return StepRecord{}, &DecodeError{DropMalformed, err.Error()}
	}
	if r.V != SchemaVersion {
		return StepRecord{}, &DecodeError{DropVersion, fmt.Sprintf("schema version %d, this daemon reads %d", r.V, SchemaVersion)}
	}
	if err := r.Validate(); err != nil {
		return StepRecord{}, &DecodeError{DropInvalid, err.Error()}
	}
	return r, nil
}

// Validate checks the record's fields against the schema.
func (r *StepRecord) Validate() error {
	minStep := int64(1)
	switch r.Kind {
	case "", KindStep:
	case KindHello:
		minStep = 0
	case KindAck:
		minStep = 0
		if r.ID == "" {
			return fmt.Errorf("ack without the id of the message it acknowledges")
		}
	case KindPreempt:
		minStep = 0
	case KindEnd:
		minStep = 0
		if r.ExitCode == nil {
			return fmt.Errorf("end without the worker's exit code")
		}
	default:
		return fmt.Errorf("unknown kind %q", r.Kind)
	}
	switch {
	case !ValidJobID(r.Job):
		return fmt.Errorf("job %q is not a job id", r.Job)
	case r.Attempt < 1:
		return fmt.Errorf("attempt %d < 1", r.Attempt)
	case r.World < 1 || r.World > MaxWorld:
		return fmt.Errorf("world %d outside 1..%d", r.World, MaxWorld)
	case r.Rank < 0 || r.Rank >= r.World:
		return fmt.Errorf("rank %d outside world of %d", r.Rank, r.World)
	case r.Step < minStep || r.Step > MaxStep:
		return fmt.Errorf("step %d outside %d..%d", r.Step, minStep, int64(MaxStep))
	case !finiteNonNeg(r.Time) || r.Time == 0 || r.Time > MaxTime:
		return fmt.Errorf("time %v is not a Unix time between 0 and %d", r.Time, int64(MaxTime))
	case !finiteNonNeg(r.Seconds) || r.Seconds > MaxSeconds:
		return fmt.Errorf("dt %v is not a number of seconds between 0 and %g", r.Seconds, MaxSeconds)
	case r.Samples < 0 || r.LocalBatch < 0 || r.GlobalBatch < 0 || r.Micro < 0 || r.Count < 0 || r.Total < 0:
		return fmt.Errorf("negative count in samples/local_batch/global_batch/micro/count/total")
	case r.Total > MaxStep:
		return fmt.Errorf("total %d above %d", r.Total, int64(MaxStep))
	case r.Session != "" && !ValidJobID(r.Session):
		return fmt.Errorf("session %q is not 1 to 64 characters of [A-Za-z0-9_-]", r.Session)
	}
	for _, f := range []struct {
		name string
		v    *float64
		max  float64
	}{{"compute_s", r.ComputeSeconds, MaxSeconds}, {"sync_s", r.SyncSeconds, MaxSeconds}, {"local_sqr", r.LocalSqr, math.MaxFloat64}, {"avg_sqr", r.AvgSqr, math.MaxFloat64}} {
		if f.v != nil && (!finiteNonNeg(*f.v) || *f.v > f.max) {
			return fmt.Errorf("%s %v is not a number between 0 and %g", f.name, *f.v, f.max)
		}
	}
	return nil
}

func finiteNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// ValidJobID reports whether s can be a job id: 1 to 64 characters from
// [A-Za-z0-9_-], so that it is safe inside a NATS subject and a file name.
func ValidJobID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// DecodeBatch splits a step message (one or more newline-separated records,
// as the daemon publishes them) and decodes each record. Lines that do not
// decode are skipped and counted in bad.
func DecodeBatch(payload []byte) (recs []StepRecord, bad int) {
	var d flatDecoder
	for len(payload) > 0 {
		line := payload
		if i := bytes.IndexByte(payload, '\n'); i >= 0 {
			line, payload = payload[:i], payload[i+1:]
		} else {
			payload = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		r, err := d.step(line)
		if err != nil {
			bad++
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad
}
