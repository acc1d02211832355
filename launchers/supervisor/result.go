package supervisor

import (
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/plugins"
)

// Signaled is the end of a rank killed by sig: exit code 128+sig, as a
// shell reports it, and the signal's name.
func Signaled(sig syscall.Signal) plugins.RankResult {
	return plugins.RankResult{ExitCode: 128 + int(sig), Signal: unix.SignalName(sig)}
}

// Status is the end of a rank whose wait(2) status is ws: its exit code,
// or Signaled for a signal; -1 for a status that is neither.
func Status(ws syscall.WaitStatus) plugins.RankResult {
	switch {
	case ws.Signaled():
		return Signaled(ws.Signal())
	case ws.Exited():
		return plugins.RankResult{ExitCode: ws.ExitStatus()}
	default:
		return plugins.RankResult{ExitCode: -1}
	}
}
