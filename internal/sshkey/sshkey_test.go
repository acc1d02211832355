package sshkey

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

// TestNewAndWrite checks that a key made here parses back, signs for its
// public key, and is written with mode 0600.
func TestNewAndWrite(t *testing.T) {
	priv, pub, err := New()
	if err != nil {
		t.Fatal(err)
	}
	s, err := gossh.ParsePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.PublicKey().Marshal(), pub.Marshal()) || pub.Type() != gossh.KeyAlgoED25519 {
		t.Fatalf("the private key's public key %s is not %s", s.PublicKey().Type(), pub.Type())
	}
	line := AuthorizedKey(pub)
	if strings.ContainsAny(line, "\n") || !strings.HasPrefix(line, "ssh-ed25519 ") {
		t.Fatalf("authorized key %q", line)
	}
	path := filepath.Join(t.TempDir(), "id")
	wpub, err := Write(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	b, _ := os.ReadFile(path)
	ws, err := gossh.ParsePrivateKey(b)
	if err != nil || !bytes.Equal(ws.PublicKey().Marshal(), wpub.Marshal()) {
		t.Fatalf("written key does not match: %v", err)
	}
}
