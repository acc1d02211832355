package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/userfs"
)

// manifestFile is the python client's checkpoint manifest
// (python/scavenger/checkpoint.py): written after the checkpoint it names, so
// that it always names a complete file. Like everything in a checkpoint
// directory, it is read as the job's owner (internal/userfs), through the
// directory's descriptor, following no symlink.
const (
	manifestFile   = "latest.json"
	manifestFormat = "scavenger.manifest/1"
	// maxManifest bounds the manifest's size (a real one is ~300 bytes).
	maxManifest = 64 << 10
)

type manifest struct {
	path string
	step int64
}

// errNoCheckpoint is a manifest that names no checkpoint the job can resume
// from; it is worded the same whatever the reason, so that it tells nothing
// of a file the owner could not see.
var errNoCheckpoint = errors.New("the checkpoint it names is not a regular file of the size it records in that directory")

// readManifest reads the manifest in j's checkpoint directory, as j's
// owner, and checks that the file it names is a regular file there with the
// size it records.
func readManifest(j api.Job) (manifest, error) {
	dir := j.CheckpointDir
	var m manifest
	err := userfs.As(fsID(j.Owner), func() error {
		d, err := userfs.OpenDir(dir)
		if err != nil {
			return fmt.Errorf("read checkpoint manifest: %w", err)
		}
		defer d.Close()
		f, err := d.Open(manifestFile, maxManifest)
		if err != nil {
			return fmt.Errorf("read checkpoint manifest: %w", err)
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil {
			return fmt.Errorf("read checkpoint manifest in %s: %w", dir, err)
		}
		var rec struct {
			Format     string `json:"format"`
			Checkpoint string `json:"checkpoint"`
			Step       int64  `json:"step"`
			Size       int64  `json:"size"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("decode checkpoint manifest in %s: %w", dir, err)
		}
		if rec.Format != manifestFormat || rec.Checkpoint == "" || strings.ContainsRune(rec.Checkpoint, '/') {
			return fmt.Errorf("checkpoint manifest in %s: not a %s manifest", dir, manifestFormat)
		}
		st, err := d.Lstat(rec.Checkpoint)
		if err != nil || !userfs.Regular(st) || (rec.Size > 0 && st.Size != rec.Size) {
			return fmt.Errorf("checkpoint manifest in %s: %w", dir, errNoCheckpoint)
		}
		m = manifest{path: filepath.Join(dir, rec.Checkpoint), step: rec.Step}
		return nil
	})
	return m, err
}

// tempFile matches the temporary files of the python client's atomic writes
// (".<name>.<pid>.scavtmp"): a writer killed mid-write leaves one behind.
var tempFile = regexp.MustCompile(`^\..+\.\d+\.scavtmp$`)

// removeTemporaries deletes, as j's owner, the temporary files that writers
// killed in the middle of a checkpoint left in j's checkpoint directory; it
// is called once the attempt's workers are gone, so no writer is still at
// work. It returns how many it removed.
func removeTemporaries(j api.Job) int {
	n := 0
	_ = userfs.As(fsID(j.Owner), func() error {
		d, err := userfs.OpenDir(j.CheckpointDir)
		if err != nil {
			return err
		}
		defer d.Close()
		names, err := d.Names()
		if err != nil {
			return err
		}
		for _, name := range names {
			if !tempFile.MatchString(name) {
				continue
			}
			if st, err := d.Lstat(name); err == nil && userfs.Regular(st) && d.Remove(name) == nil {
				n++
			}
		}
		return nil
	})
	return n
}

// latestCheckpoint is the newest complete checkpoint in j's checkpoint
// directory (from its manifest) and the step it holds; without a manifest,
// the directory itself when the script left files there (it knows their
// names), at an unknown step (0).
func latestCheckpoint(j api.Job) (string, int64) {
	if m, err := readManifest(j); err == nil {
		return m.path, m.step
	}
	var names []string
	_ = userfs.As(fsID(j.Owner), func() error {
		d, err := userfs.OpenDir(j.CheckpointDir)
		if err != nil {
			return err
		}
		defer d.Close()
		names, err = d.Names()
		return err
	})
	for _, name := range names {
		if name != spoolDir {
			return j.CheckpointDir, 0
		}
	}
	return "", 0
}
