package provider

import (
	"fmt"

	gossh "golang.org/x/crypto/ssh"

	"github.com/scavenger-ml/scavenger/internal/sshkey"
)

// Keys are what a set of instances boots with and what reaches them: a
// client key, whose public half Boot authorizes, and a host key, which
// Boot installs and HostKey verifies.
type Keys struct {
	Boot Boot
	// ClientKey is the client's private key (OpenSSH PEM) and Signer the same key.
	ClientKey []byte
	Signer    gossh.Signer
	// HostKey is the instances' public host key.
	HostKey gossh.PublicKey
}

// NewKeys makes a client key and a host key (ed25519).
func NewKeys() (Keys, error) {
	cpriv, cpub, err := sshkey.New()
	if err != nil {
		return Keys{}, fmt.Errorf("client key: %w", err)
	}
	signer, err := gossh.ParsePrivateKey(cpriv)
	if err != nil {
		return Keys{}, fmt.Errorf("client key: %w", err)
	}
	hpriv, hpub, err := sshkey.New()
	if err != nil {
		return Keys{}, fmt.Errorf("host key: %w", err)
	}
	return Keys{Boot: Boot{AuthorizedKey: sshkey.AuthorizedKey(cpub), HostKey: hpriv, HostKeyPublic: sshkey.AuthorizedKey(hpub)},
		ClientKey: cpriv, Signer: signer, HostKey: hpub}, nil
}

// ParseKeys makes Keys of a client key and a host key kept as private
// keys (OpenSSH PEM): a pool's keys, read back after a restart.
func ParseKeys(clientKey, hostKey []byte) (Keys, error) {
	signer, err := gossh.ParsePrivateKey(clientKey)
	if err != nil {
		return Keys{}, fmt.Errorf("client key: %w", err)
	}
	host, err := gossh.ParsePrivateKey(hostKey)
	if err != nil {
		return Keys{}, fmt.Errorf("host key: %w", err)
	}
	return Keys{Boot: Boot{AuthorizedKey: sshkey.AuthorizedKey(signer.PublicKey()), HostKey: hostKey, HostKeyPublic: sshkey.AuthorizedKey(host.PublicKey())},
		ClientKey: clientKey, Signer: signer, HostKey: host.PublicKey()}, nil
}
