package jobs

import (
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"strings"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// newJobID derives a job id from a name and six random hex digits.
func newJobID(name string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

// defaultName makes a job name from the command: the first argument that is
// not an interpreter or a flag ("python3 train.py" -> "train").
func defaultName(cmd []string) string {
	pick := ""
	for _, a := range cmd {
		base := filepath.Base(a)
		if pick == "" {
			pick = base
		}
		if strings.HasPrefix(a, "-") || strings.ContainsAny(a, "{}= \t") || isInterpreter(base) {
			continue
		}
		pick = base
		break
	}
	pick = strings.TrimSuffix(pick, filepath.Ext(pick))
	out := make([]byte, 0, 32)
	for i := 0; i < len(pick) && len(out) < 32; i++ {
		if c := pick[i]; telemetry.ValidJobID(string(c)) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return "job"
	}
	return string(out)
}

func isInterpreter(base string) bool {
	switch {
	case strings.HasPrefix(base, "python"), base == "torchrun", base == "env", base == "sh", base == "bash":
		return true
	}
	return false
}
