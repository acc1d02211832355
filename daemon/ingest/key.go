package ingest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/scavenger-ml/scavenger/internal/secret"
)

// Key makes and checks the tokens that bind a worker's connection to its
// job's attempt: a token is an HMAC of the job and attempt under the key, so
// the daemon keeps no table of them and a restarted daemon still knows the
// tokens of the attempts it reattaches to.
type Key []byte

// LoadKey reads the key at path, or makes one there (32 random bytes, mode
// 0600) when there is none. A key others can read, or another user owns,
// is refused (internal/secret).
func LoadKey(path string) (Key, error) {
	b, err := secret.Read(path, "telemetry key", "forge tokens", func() ([]byte, error) {
		b := make([]byte, 32)
		_, err := rand.Read(b)
		return b, err
	})
	if err != nil {
		return nil, err
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
