package ec2emu

import (
	"encoding/base64"
	"fmt"

	"github.com/scavenger-ml/scavenger/internal/cloudemu"
)

// bootFromUserData reads the SSH keys an instance boots with from its
// base64 user data, a #cloud-config document.
func bootFromUserData(b64 string) (cloudemu.Keys, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return cloudemu.Keys{}, fmt.Errorf("user data is not base64: %w", err)
	}
	return cloudemu.KeysFromCloudConfig(string(raw))
}
