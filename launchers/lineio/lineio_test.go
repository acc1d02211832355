package lineio

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

type piece struct {
	s        string
	complete bool
}

func TestRead(t *testing.T) {
	long := strings.Repeat("x", 40)
	tests := []struct {
		name string
		in   string
		want []piece
	}{
		{"lines", "a\nb\r\n\nc", []piece{{"a", true}, {"b", true}, {"", true}, {"c", true}}},
		{"empty", "", nil},
		{"a long line in pieces", long + "\nz\n", []piece{{long[:16], false}, {long[16:32], false}, {long[32:], true}, {"z", true}}},
	}
	for _, tt := range tests {
		var got []piece
		err := Read(strings.NewReader(tt.in), 16, func(s string, complete bool) { got = append(got, piece{s, complete}) })
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

// failing returns its data, then an error, then more data.
type failing struct {
	data []string
	err  error
}

func (f *failing) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, io.EOF
	}
	d := f.data[0]
	f.data = f.data[1:]
	if d == "" {
		return 0, f.err
	}
	return copy(p, d), nil
}

func TestReadErrorDiscardsTheRest(t *testing.T) {
	boom := errors.New("boom")
	r := &failing{data: []string{"a\nb", "", "rest\n"}, err: boom}
	var got []string
	err := Read(r, 16, func(s string, _ bool) { got = append(got, s) })
	if !errors.Is(err, boom) || !reflect.DeepEqual(got, []string{"a", "b"}) || len(r.data) != 0 {
		t.Errorf("got %q, %v, %d unread; want [a b], boom, all read", got, err, len(r.data))
	}
}
