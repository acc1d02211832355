package daemon

import "os"

// What a daemon that serves every local user (a root scavd, shared) does
// otherwise than one that serves its own user alone, by default.

// shared reports whether the daemon serves every local user (a root
// daemon, not scavctl's own): its sockets are open to all, and the kernel
// (API) or the attempt's token (telemetry) says who calls.
func (d *Daemon) shared() bool { return os.Geteuid() == 0 && !d.cfg.Standalone }

// outputReadPerUser is how fast one user's output is read: by default,
// without bound on a daemon that serves one user (no one else's requests
// wait on what its jobs print).
func (d *Daemon) outputReadPerUser() int64 {
	if r := d.cfg.OutputReadPerUser; r != 0 || d.shared() {
		return r
	}
	return -1
}

// metricsPerJob says whether /metrics has the series that name jobs:
// Config.MetricsPerJob "on" or "off", or by default ("auto") only when the
// daemon serves its own user alone, since anyone who can reach /metrics
// reads them.
func (d *Daemon) metricsPerJob() bool {
	switch d.cfg.MetricsPerJob {
	case "on":
		return true
	case "off":
		return false
	}
	return !d.shared()
}
