package localcloudtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/scavenger-ml/scavenger/internal/cloudemu"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// Backend adapts a local cloud to the machine source of the cloud API
// emulations (cloudemu.Backend): their instances are its instances.
func Backend(c *localcloud.Cloud) cloudemu.Backend { return backend{c} }

type backend struct{ *localcloud.Cloud }

// Launch provisions l's machines on the local cloud; its capacity error
// is cloudemu.ErrNoCapacity.
func (b backend) Launch(ctx context.Context, l cloudemu.Launch) ([]cloudemu.Machine, error) {
	insts, err := b.Provision(ctx, provider.ProvisionRequest{Type: l.Type, Count: l.Count, Market: l.Market, Zone: l.Zone, Tags: l.Tags,
		Token: l.Token, MaxPriceUSD: l.MaxPriceUSD, Boot: provider.Boot{AuthorizedKey: l.Keys.AuthorizedKey, HostKey: l.Keys.HostKey, HostKeyPublic: l.Keys.HostKeyPublic}})
	var ms []cloudemu.Machine
	for _, in := range insts {
		ms = append(ms, cloudemu.Machine{ID: in.ID, Addr: in.Addr, Launched: in.Launched})
	}
	if errors.Is(err, provider.ErrCapacity) {
		err = fmt.Errorf("%w: %w", cloudemu.ErrNoCapacity, err)
	}
	return ms, err
}
