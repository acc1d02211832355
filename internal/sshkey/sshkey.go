// Package sshkey makes SSH keys: ed25519 key pairs, the private key in
// OpenSSH PEM form. It is a small production helper (the cloudvm launcher
// makes each pool's keys with it; the namespace machines of the local cloud
// and of the tests make theirs too), not a test fixture.
package sshkey

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"

	gossh "golang.org/x/crypto/ssh"
)

// New makes an ed25519 key pair: the private key in OpenSSH PEM form and
// the public key.
func New() (private []byte, public gossh.PublicKey, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	blk, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, nil, fmt.Errorf("marshal key: %w", err)
	}
	sp, err := gossh.NewPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("public key: %w", err)
	}
	return pem.EncodeToMemory(blk), sp, nil
}

// Write writes a new ed25519 private key (OpenSSH PEM, mode 0600) to path
// and returns its public key.
func Write(path string) (gossh.PublicKey, error) {
	priv, pub, err := New()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, priv, 0o600); err != nil {
		return nil, fmt.Errorf("write key %s: %w", path, err)
	}
	return pub, nil
}

// AuthorizedKey is pub as one authorized_keys line, without its newline.
func AuthorizedKey(pub gossh.PublicKey) string {
	b := gossh.MarshalAuthorizedKey(pub)
	return string(b[:len(b)-1])
}
