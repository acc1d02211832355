package ingest

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestConnectionsAreBoundToTheirAttempt: only a hello with the attempt's
// token binds a connection, and only its attempt's lines count on it; the
// rest are refused and counted.
func TestConnectionsAreBoundToTheirAttempt(t *testing.T) {
	key, err := LoadKey(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	hello := func(job string, attempt int, token string) string {
		return fmt.Sprintf(`{"v":1,"kind":"hello","job":%q,"attempt":%d,"rank":0,"world":1,"step":0,"t":1,"token":%q}`, job, attempt, token)
	}
	step := func(job string, attempt int) string {
		return fmt.Sprintf(`{"v":1,"job":%q,"attempt":%d,"rank":0,"world":1,"step":1,"t":1,"dt":0.1,"samples":8}`, job, attempt)
	}
	for _, c := range []struct {
		name                      string
		lines                     []string
		accepted, unbound, forged int64
	}{
		{"bound", []string{hello("a-000001", 1, key.Token("a-000001", 1)), step("a-000001", 1)}, 1, 0, 0},
		{"no hello", []string{step("a-000001", 1)}, 0, 1, 0},
		{"wrong token", []string{hello("a-000001", 1, "0123456789abcdef0123456789abcdef"), step("a-000001", 1)}, 0, 2, 0},
		{"another attempt's token", []string{hello("a-000001", 2, key.Token("a-000001", 1)), step("a-000001", 2)}, 0, 2, 0},
		{"another job's record", []string{hello("a-000001", 1, key.Token("a-000001", 1)), step("b-000001", 1), step("a-000001", 2)}, 0, 0, 2},
		{"a forged ack", []string{hello("a-000001", 1, key.Token("a-000001", 1)),
			`{"v":1,"kind":"ack","job":"b-000001","attempt":1,"rank":0,"world":1,"step":0,"t":1,"id":"x"}`}, 0, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			col := &collector{msgs: map[string][][]byte{}}
			in := newServer(col, zap.NewNop())
			in.verify = key.Verify
			in.serve(bytes.NewReader([]byte(strings.Join(c.lines, "\n")+"\n")), &peer{})
			s := in.Stats()
			if s.Accepted != c.accepted || s.Dropped[DropUnbound] != c.unbound || s.Dropped[DropForged] != c.forged {
				t.Errorf("accepted %d, unbound %d, forged %d; want %d, %d, %d", s.Accepted, s.Dropped[DropUnbound], s.Dropped[DropForged],
					c.accepted, c.unbound, c.forged)
			}
			if c.accepted == 0 && len(col.msgs) != 0 {
				t.Errorf("published %v", col.msgs)
			}
		})
	}
}
