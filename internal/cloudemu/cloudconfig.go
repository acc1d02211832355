package cloudemu

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// cloudConfig is the part of a cloud-init #cloud-config document the
// emulated instances honour: the authorized keys and the host key.
type cloudConfig struct {
	AuthorizedKeys []string          `yaml:"ssh_authorized_keys"`
	SSHKeys        map[string]string `yaml:"ssh_keys"`
}

// KeysFromCloudConfig reads the SSH keys an instance boots with from its
// #cloud-config document (EC2's user data, decoded; GCE's user-data
// metadata). The emulations honour these keys only: no other cloud-init
// module runs.
func KeysFromCloudConfig(doc string) (Keys, error) {
	if !strings.HasPrefix(doc, "#cloud-config") {
		return Keys{}, errors.New("user data is not a #cloud-config document (this emulation boots instances from cloud-init's ssh_authorized_keys and ssh_keys only)")
	}
	var cc cloudConfig
	if err := yaml.Unmarshal([]byte(doc), &cc); err != nil {
		return Keys{}, fmt.Errorf("user data: %w", err)
	}
	priv, pub := cc.SSHKeys["ed25519_private"], cc.SSHKeys["ed25519_public"]
	if len(cc.AuthorizedKeys) == 0 || priv == "" || pub == "" {
		return Keys{}, errors.New("user data: want ssh_authorized_keys and ssh_keys.ed25519_private/ed25519_public")
	}
	return Keys{AuthorizedKey: strings.Join(cc.AuthorizedKeys, "\n"), HostKey: []byte(priv), HostKeyPublic: strings.TrimSpace(pub)}, nil
}
