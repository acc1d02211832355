package daemon

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/jsonfile"
)

// writeDiscovery writes info as stateDir's discovery file (api.DiscoveryFile,
// which api.ReadDiscovery reads), atomically.
func writeDiscovery(stateDir string, info api.Info) error {
	if err := jsonfile.Write(filepath.Join(stateDir, api.DiscoveryFile), info, 0o600); err != nil {
		return fmt.Errorf("write discovery file: %w", err)
	}
	return nil
}

// removeDiscovery removes stateDir's discovery file if process pid wrote it.
func removeDiscovery(stateDir string, pid int) {
	if info, err := api.ReadDiscovery(stateDir); err == nil && info.PID == pid {
		_ = os.Remove(filepath.Join(stateDir, api.DiscoveryFile))
	}
}
