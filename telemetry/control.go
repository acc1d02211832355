package telemetry

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Control kinds: what the daemon asks of a job's workers.
const (
	// ControlCheckpoint asks the workers to finish step AfterStep, have rank 0
	// write a checkpoint into Dir, acknowledge, and exit 0.
	ControlCheckpoint = "checkpoint"
	// ControlStored tells a worker whose hello asked for it (Confirm) that
	// the daemon is done with the first Lines lines it wrote on this
	// connection, the hello included: their step records are stored (or
	// refused as invalid, for good). Job, ID and Attempt are not set.
	ControlStored = "stored"
)

// Control is a message from the daemon to a job's workers. The controller
// publishes it on ControlSubject; every node daemon writes it, as one JSON
// line, on the telemetry connections of that job's workers.
type Control struct {
	V       int    `json:"v"`
	Kind    string `json:"kind"`
	ID      string `json:"id"`
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
	// AfterStep is the last step to complete before acting (all ranks alike).
	AfterStep int64 `json:"after_step,omitempty"`
	// Dir is where to write the checkpoint.
	Dir string `json:"dir,omitempty"`
	// Lines is, in a ControlStored message, how many lines of the
	// connection the daemon is done with.
	Lines int64 `json:"lines,omitempty"`
}

// Encode returns the control message as one JSON line.
func (c Control) Encode() []byte {
	c.V = SchemaVersion
	b, _ := json.Marshal(c)
	return append(b, '\n')
}

// storedPrefix is the start of Control{Kind: ControlStored}.Encode(), up to
// its count of lines.
var storedPrefix = func() []byte {
	b := Control{Kind: ControlStored, Lines: 1}.Encode()
	return b[:len(b)-len("1}\n")]
}()

// StoredLine is Control{Kind: ControlStored, Lines: lines}.Encode() for
// lines > 0, written without reflection: the daemon writes one to each
// confirmed connection every few milliseconds.
func StoredLine(lines int64) []byte {
	b := append(make([]byte, 0, len(storedPrefix)+24), storedPrefix...)
	b = strconv.AppendInt(b, lines, 10)
	return append(b, '}', '\n')
}

// DecodeControl parses a control message published on ControlSubject.
func DecodeControl(b []byte) (Control, error) {
	var c Control
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("decode control message: %w", err)
	}
	if !ValidJobID(c.Job) || c.Kind == "" || c.ID == "" || c.Attempt < 1 {
		return c, fmt.Errorf("decode control message: incomplete %+v", c)
	}
	return c, nil
}
