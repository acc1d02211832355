package jobs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// manifestFile is the python client's checkpoint manifest
// (python/scavenger/checkpoint.py): written after the checkpoint it names, so
// that it always names a complete file.
const (
	manifestFile   = "latest.json"
	manifestFormat = "scavenger.manifest/1"
)

type manifest struct {
	path string
	step int64
}

// readManifest reads dir's manifest and checks that the file it names exists
// with the size it records.
func readManifest(dir string) (manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return manifest{}, fmt.Errorf("read checkpoint manifest: %w", err)
	}
	var m struct {
		Format     string `json:"format"`
		Checkpoint string `json:"checkpoint"`
		Step       int64  `json:"step"`
		Size       int64  `json:"size"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return manifest{}, fmt.Errorf("decode checkpoint manifest in %s: %w", dir, err)
	}
	if m.Format != manifestFormat || m.Checkpoint == "" || strings.ContainsRune(m.Checkpoint, '/') {
		return manifest{}, fmt.Errorf("checkpoint manifest in %s: not a %s manifest", dir, manifestFormat)
	}
	path := filepath.Join(dir, m.Checkpoint)
	st, err := os.Stat(path)
	if err != nil {
		return manifest{}, fmt.Errorf("checkpoint manifest in %s: %w", dir, err)
	}
	if m.Size > 0 && st.Size() != m.Size {
		return manifest{}, fmt.Errorf("checkpoint %s: %d bytes, the manifest says %d", path, st.Size(), m.Size)
	}
	return manifest{path: path, step: m.Step}, nil
}
