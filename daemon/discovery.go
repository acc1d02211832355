package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// discoveryFile is where a running daemon writes how to reach it, so that a
// scavctl started later finds a standalone daemon on a random port.
const discoveryFile = "scavd.json"

func writeDiscovery(stateDir string, info Info) error {
	b, _ := json.MarshalIndent(info, "", "  ")
	tmp := filepath.Join(stateDir, discoveryFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write discovery file: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(stateDir, discoveryFile)); err != nil {
		return fmt.Errorf("write discovery file: %w", err)
	}
	return nil
}

// removeDiscovery removes the discovery file if it is this process's.
func removeDiscovery(stateDir string, pid int) {
	if info, err := ReadDiscovery(stateDir); err == nil && info.PID == pid {
		_ = os.Remove(filepath.Join(stateDir, discoveryFile))
	}
}

// ReadDiscovery reads the discovery file of the daemon that uses stateDir.
// A file left by a process that no longer exists is reported as absent.
func ReadDiscovery(stateDir string) (Info, error) {
	var info Info
	b, err := os.ReadFile(filepath.Join(stateDir, discoveryFile))
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("decode %s: %w", filepath.Join(stateDir, discoveryFile), err)
	}
	if err := syscall.Kill(info.PID, 0); info.PID <= 0 || err != nil && !errors.Is(err, syscall.EPERM) {
		return info, fmt.Errorf("daemon %d in %s: %w", info.PID, stateDir, os.ErrNotExist)
	}
	return info, nil
}

// sortJobs orders jobs oldest first.
func sortJobs(jobs []Job) {
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].Created.Before(jobs[b].Created) })
}
