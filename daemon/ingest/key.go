package ingest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
)

// Key makes and checks the tokens that bind a worker's connection to its
// job's attempt: a token is an HMAC of the job and attempt under the key, so
// the daemon keeps no table of them and a restarted daemon still knows the
// tokens of the attempts it reattaches to.
type Key []byte

// LoadKey reads the key at path, or makes one there (32 random bytes, mode
// 0600) when there is none. A key others can read is refused.
func LoadKey(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		b = make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("make telemetry key: %w", err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, fmt.Errorf("write telemetry key %s: %w", path, err)
		}
		return Key(b), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read telemetry key: %w", err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("telemetry key %s: mode %s lets others forge tokens; chmod 600 it", path, st.Mode().Perm())
	}
	if len(b) < 16 {
		return nil, fmt.Errorf("telemetry key %s: %d bytes, want at least 16", path, len(b))
	}
	return Key(b), nil
}

// Token is the token of job's attempt.
func (k Key) Token(job string, attempt int) string {
	m := hmac.New(sha256.New, k)
	m.Write([]byte(job))
	m.Write([]byte{0})
	m.Write([]byte(strconv.Itoa(attempt)))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// Verify reports whether token is the token of job's attempt.
func (k Key) Verify(job string, attempt int, token string) bool {
	return hmac.Equal([]byte(k.Token(job, attempt)), []byte(token))
}
