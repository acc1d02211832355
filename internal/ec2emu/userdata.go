package ec2emu

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/scavenger-ml/scavenger/internal/cloudemu"
)

// cloudConfig is the part of a cloud-init #cloud-config document the
// emulated instances honour: the authorized keys and the host key.
type cloudConfig struct {
	AuthorizedKeys []string          `yaml:"ssh_authorized_keys"`
	SSHKeys        map[string]string `yaml:"ssh_keys"`
}

// bootFromUserData reads the SSH keys an instance boots with from its
// base64 user data, a #cloud-config document.
func bootFromUserData(b64 string) (cloudemu.Keys, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return cloudemu.Keys{}, fmt.Errorf("user data is not base64: %w", err)
	}
	if !strings.HasPrefix(string(raw), "#cloud-config") {
		return cloudemu.Keys{}, errors.New("user data is not a #cloud-config document (this emulation boots instances from cloud-init's ssh_authorized_keys and ssh_keys only)")
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(raw, &cc); err != nil {
		return cloudemu.Keys{}, fmt.Errorf("user data: %w", err)
	}
	priv, pub := cc.SSHKeys["ed25519_private"], cc.SSHKeys["ed25519_public"]
	if len(cc.AuthorizedKeys) == 0 || priv == "" || pub == "" {
		return cloudemu.Keys{}, errors.New("user data: want ssh_authorized_keys and ssh_keys.ed25519_private/ed25519_public")
	}
	return cloudemu.Keys{AuthorizedKey: strings.Join(cc.AuthorizedKeys, "\n"), HostKey: []byte(priv), HostKeyPublic: strings.TrimSpace(pub)}, nil
}
