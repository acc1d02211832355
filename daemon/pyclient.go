package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/scavenger-ml/scavenger/python"
)

// extractPythonClient writes the python client this binary carries under
// root/<content hash>/ (once per version) and returns the directory to put
// on the workers' PYTHONPATH.
func extractPythonClient(root string) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(python.Client, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := fs.ReadFile(python.Client, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash embedded python client: %w", err)
	}
	dir := filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:12])
	if dirComplete(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", root, err)
	}
	tmp, err := os.MkdirTemp(root, ".extract-")
	if err != nil {
		return "", fmt.Errorf("extract python client into %s: %w", root, err)
	}
	err = fs.WalkDir(python.Client, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(tmp, p)
		if e.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := fs.ReadFile(python.Client, p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644)
	}
	if err == nil {
		_ = os.Chmod(tmp, 0o755)
		if err = os.Rename(tmp, dir); err != nil && dirComplete(dir) {
			err = nil // another daemon extracted the same version first
		}
	}
	if err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("extract python client into %s: %w", dir, err)
	}
	return dir, nil
}

func dirComplete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".complete"))
	return err == nil
}
