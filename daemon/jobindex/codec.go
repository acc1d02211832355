package jobindex

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/scavenger-ml/scavenger/api"
)

// The bucket holds each summary in a compact binary form: a daemon reads
// every summary at start, and decoding JSON was most of that (some 20 µs a
// summary on a busy machine against about 1 µs). The form is a version byte
// then the fields in order: strings as a length and bytes, numbers as
// varints, times as Unix nanoseconds (0: none), float64 as its bits.
// TestCodecKeepsEveryField holds it to every field of api.JobSummary.

// codecVersion starts an encoded summary; a value that starts with '{' is
// a summary in JSON.
const codecVersion = 1

// errCodec is a summary that does not decode.
var errCodec = errors.New("not a job summary")

// encode is s in the bucket's form.
func encode(s api.JobSummary) []byte {
	b := make([]byte, 0, 160)
	b = append(b, codecVersion)
	str := func(v string) {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	num := func(v int64) { b = binary.AppendVarint(b, v) }
	tm := func(t *time.Time) {
		if t == nil || t.IsZero() {
			num(0)
			return
		}
		num(t.UnixNano())
	}
	str(s.ID)
	str(s.Name)
	num(int64(len(s.Command)))
	for _, w := range s.Command {
		str(w)
	}
	if s.Owner == nil {
		num(-1)
	} else {
		num(int64(s.Owner.UID))
		num(int64(s.Owner.GID))
		str(s.Owner.User)
	}
	str(s.Node)
	str(s.Launcher)
	str(string(s.State))
	str(string(s.Phase))
	num(int64(s.Attempt))
	num(int64(s.Config.Workers))
	num(int64(s.Config.GlobalBatch))
	str(s.Config.MachineType)
	str(s.Config.Market)
	num(int64(s.Config.Nodes))
	b = binary.AppendUvarint(b, math.Float64bits(s.Config.LRScale))
	tm(&s.Created)
	tm(s.Started)
	tm(s.Ended)
	if s.ExitCode == nil {
		num(0)
	} else {
		num(1)
		num(int64(*s.ExitCode))
	}
	num(s.LastStep)
	return b
}

// decoder reads the fields of an encoded summary in order; the first
// thing it cannot read is its error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) num() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) time() *time.Time {
	ns := d.num()
	if ns == 0 {
		return nil
	}
	t := time.Unix(0, ns).UTC()
	return &t
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errCodec
	}
	d.b = nil
}

// decode reads a summary in the bucket's form (or in JSON).
func decode(b []byte) (api.JobSummary, error) {
	var s api.JobSummary
	if len(b) > 0 && b[0] == '{' {
		err := json.Unmarshal(b, &s)
		return s, err
	}
	if len(b) == 0 || b[0] != codecVersion {
		return s, fmt.Errorf("%w: version %v", errCodec, b[:min(1, len(b))])
	}
	d := &decoder{b: b[1:]}
	s.ID, s.Name = d.str(), d.str()
	if n := d.num(); n > 0 && n <= int64(len(d.b)) {
		s.Command = make([]string, n)
		for i := range s.Command {
			s.Command[i] = d.str()
		}
	} else if n != 0 {
		d.fail()
	}
	if uid := d.num(); uid >= 0 {
		s.Owner = &api.Owner{UID: uint32(uid), GID: uint32(d.num()), User: d.str()}
	}
	s.Node, s.Launcher = d.str(), d.str()
	s.State, s.Phase = api.JobState(d.str()), api.Phase(d.str())
	s.Attempt = int(d.num())
	s.Config.Workers, s.Config.GlobalBatch = int(d.num()), int(d.num())
	s.Config.MachineType, s.Config.Market = d.str(), d.str()
	s.Config.Nodes = int(d.num())
	s.Config.LRScale = math.Float64frombits(d.uvarint())
	if t := d.time(); t != nil {
		s.Created = *t
	}
	s.Started, s.Ended = d.time(), d.time()
	if d.num() == 1 {
		c := int(d.num())
		s.ExitCode = &c
	}
	s.LastStep = d.num()
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	return s, d.err
}
