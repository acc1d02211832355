package jobs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

// tempFile matches the temporary files of the python client's atomic writes
// (".<name>.<pid>.scavtmp"): a writer killed mid-write leaves one behind.
var tempFile = regexp.MustCompile(`^\..+\.\d+\.scavtmp$`)

// removeTemporaries deletes the temporary files that writers killed in the
// middle of a checkpoint left in dir; it is called once the attempt's
// workers are gone, so no writer is still at work. It returns how many it
// removed.
func removeTemporaries(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if e.Type().IsRegular() && tempFile.MatchString(e.Name()) && os.Remove(filepath.Join(dir, e.Name())) == nil {
			n++
		}
	}
	return n
}
