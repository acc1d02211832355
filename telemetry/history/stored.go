package history

import (
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StoredAt reads where a message the step stream republished
// (telemetry.StoredStepSubject) was stored: its stream sequence, and the
// sequence of the message before it on the same subject (0: none), which
// says whether a reader that saw that one missed any in between.
func StoredAt(m *nats.Msg) (seq, last uint64, ok bool) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil || seq == 0 {
		return 0, 0, false
	}
	last, err = strconv.ParseUint(m.Header.Get(jetstream.LastSequenceHeader), 10, 64)
	if err != nil || last >= seq {
		return 0, 0, false
	}
	return seq, last, true
}
