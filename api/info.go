package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Version is the build's version, set by the linker.
var Version = "dev"

// SystemStateDir is the state directory of the node's system daemon (a
// root scavd, as a service).
const SystemStateDir = "/var/lib/scavenger"

// DefaultListen is where a scavd's embedded NATS server listens unless told otherwise.
const DefaultListen = "127.0.0.1:4233"

// DefaultStateDir is the directory systemd made for the service
// ($STATE_DIRECTORY, from StateDirectory=) when there is one, else
// $XDG_STATE_HOME/scavenger (or ~/.local/state/scavenger) for a user, and
// /var/lib/scavenger for root.
func DefaultStateDir() string {
	if d, _, _ := strings.Cut(os.Getenv("STATE_DIRECTORY"), ":"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return SystemStateDir
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "scavenger")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "scavenger")
	}
	return filepath.Join(os.TempDir(), "scavenger")
}

// Info describes a daemon (the answer to scav.api.ping and part of stats).
type Info struct {
	Node       string   `json:"node"`
	Version    string   `json:"version"`
	PID        int      `json:"pid"`
	Standalone bool     `json:"standalone"`
	Socket     string   `json:"socket"`
	NATS       string   `json:"nats"`
	Active     []string `json:"active"`
	// Metrics is the address of the Prometheus endpoint, when it is served.
	Metrics string `json:"metrics,omitempty"`
	// API is the API's unix socket; APIAddr its TCP address, when it has one.
	API     string `json:"api,omitempty"`
	APIAddr string `json:"api_addr,omitempty"`
	// Launcher names the launcher the daemon's jobs run on.
	Launcher string `json:"launcher,omitempty"`
	// StateDisk, when set, says what is wrong with the daemon's state disk
	// (full: the store cannot write until there is room again).
	StateDisk string `json:"state_disk,omitempty"`
	// CheckpointDisks names the running jobs' checkpoint directories that
	// are short of space, with the space left.
	CheckpointDisks []string `json:"checkpoint_disks,omitempty"`
}

// Stats is the answer to scav.api.stats.
type Stats struct {
	Info   Info        `json:"info"`
	Ingest IngestStats `json:"ingest"`
}

// IngestStats counts what the telemetry socket received.
type IngestStats struct {
	// Accepted counts records that passed validation and were handed to NATS.
	Accepted int64 `json:"accepted"`
	// Dropped counts rejected lines by reason (telemetry.Drop* and "publish_failed").
	Dropped map[string]int64 `json:"dropped"`
	// Connections is the number of open worker connections.
	Connections int64 `json:"connections"`
}

// DiscoveryFile, in a daemon's state directory, is where a running daemon
// writes how to reach it (its Info), so that a scavctl started later finds
// a standalone daemon on a random port.
const DiscoveryFile = "scavd.json"

// ReadDiscovery reads the discovery file of the daemon that uses stateDir.
// A file left by a process that no longer exists is reported as absent.
func ReadDiscovery(stateDir string) (Info, error) {
	var info Info
	b, err := os.ReadFile(filepath.Join(stateDir, DiscoveryFile))
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("decode %s: %w", filepath.Join(stateDir, DiscoveryFile), err)
	}
	if err := syscall.Kill(info.PID, 0); info.PID <= 0 || err != nil && !errors.Is(err, syscall.EPERM) {
		return info, fmt.Errorf("daemon %d in %s: %w", info.PID, stateDir, os.ErrNotExist)
	}
	return info, nil
}
