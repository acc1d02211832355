package gcecloud

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	compute "google.golang.org/api/compute/v1"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// tagsKey is the metadata item that keeps an instance's tags as cloudvm
// gave them: labels only take lower-case letters, digits, '-' and '_'.
const tagsKey = "scavenger-tags"

// An instance's ID is "ZONE/NAME": the API names it by both.
func instanceID(zone, name string) string { return zone + "/" + name }

func splitID(id string) (zone, name string, ok bool) { return strings.Cut(id, "/") }

// names are the instance names of a request: derived from its token, so
// that a retried insert whose answer was lost meets the instance it made.
func names(req provider.ProvisionRequest) []string {
	h := sha256.Sum256([]byte(req.Token + "|" + req.Zone))
	base := "scav-" + hex.EncodeToString(h[:6])
	out := make([]string, req.Count)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", base, i)
	}
	return out
}

// requestID is the UUID that makes the insert of name idempotent for GCE
// (derived from the token: a retry carries the same one).
func requestID(token, name string) string {
	h := sha256.Sum256([]byte(token + "|" + name))
	h[6] = h[6]&0x0f | 0x50 // version 5 style
	h[8] = h[8]&0x3f | 0x80 // variant
	s := hex.EncodeToString(h[:16])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

// label turns a tag into a label key or value: lower case, the characters
// labels allow, 63 at most.
func label(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	return string(b[:min(len(b), 63)])
}

// labels are the labels of tags (the display name excepted: it is the
// instance's name).
func labels(tags map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range tags {
		if k != provider.TagName {
			out[label(k)] = label(v)
		}
	}
	return out
}

// Provision inserts req.Count instances (see the package comment), waits
// for the inserts' operations and returns them; on a failure, those made.
func (p *Provider) Provision(ctx context.Context, req provider.ProvisionRequest) ([]provider.Instance, error) {
	if !p.Has(req.Type) {
		return nil, fmt.Errorf("provision: type %q is not among %v", req.Type, p.o.Types)
	}
	if p.o.Image == "" {
		return nil, fmt.Errorf("provision: %w: no image (cloud.image)", provider.ErrUnavailable)
	}
	if !slices.Contains(p.o.Zones, req.Zone) {
		return nil, fmt.Errorf("provision: zone %q is not among %v", req.Zone, p.o.Zones)
	}
	tags, _ := json.Marshal(req.Tags)
	var made []provider.Instance
	for _, name := range names(req) {
		in := p.instanceSpec(req, name, string(tags))
		op, err := p.svc.Instances.Insert(p.o.Project, req.Zone, in).RequestId(requestID(req.Token, name)).Context(ctx).Do()
		if err == nil {
			err = p.wait(ctx, req.Zone, op)
		}
		err = classify(err)
		if err != nil && !errors.Is(err, errExists) && !isExists(err) {
			return made, fmt.Errorf("insert %s (%s %s) in %s: %w", name, req.Type, req.Market, req.Zone, err)
		}
		got, err := p.get(ctx, req.Zone, name)
		if err != nil {
			return made, err
		}
		made = append(made, got)
	}
	p.log.Info("instances launched", zap.Int("count", len(made)), zap.String("type", req.Type), zap.String("zone", req.Zone), zap.String("market", req.Market))
	return made, nil
}

// isExists reports whether err is the API's answer to an insert of a name
// that exists (a retry whose first answer was lost).
func isExists(err error) bool {
	return strings.Contains(err.Error(), "alreadyExists") || strings.Contains(err.Error(), "already exists")
}

// instanceSpec is the resource an insert creates.
func (p *Provider) instanceSpec(req provider.ProvisionRequest, name, tags string) *compute.Instance {
	userData := provider.CloudConfig(req.Boot, req.OrphanTimeout)
	nic := &compute.NetworkInterface{Network: p.o.Network, Subnetwork: p.o.Subnetwork}
	if p.o.PublicIP {
		nic.AccessConfigs = []*compute.AccessConfig{{Name: "External NAT", Type: "ONE_TO_ONE_NAT"}}
	}
	in := &compute.Instance{
		Name: name, MachineType: "zones/" + req.Zone + "/machineTypes/" + req.Type, Labels: labels(req.Tags),
		Disks: []*compute.AttachedDisk{{Boot: true, AutoDelete: true, InitializeParams: &compute.AttachedDiskInitializeParams{
			SourceImage: p.o.Image, DiskSizeGb: p.o.DiskGB}}},
		NetworkInterfaces: []*compute.NetworkInterface{nic},
		Metadata:          &compute.Metadata{Items: []*compute.MetadataItems{{Key: "user-data", Value: &userData}, {Key: tagsKey, Value: &tags}}},
		Scheduling:        &compute.Scheduling{ProvisioningModel: "STANDARD", OnHostMaintenance: "MIGRATE", AutomaticRestart: new(bool)},
	}
	if req.Market == provider.Spot {
		// A spot VM is deleted when preempted; its maintenance ends it too.
		in.Scheduling = &compute.Scheduling{ProvisioningModel: "SPOT", InstanceTerminationAction: "DELETE", OnHostMaintenance: "TERMINATE",
			AutomaticRestart: new(bool)}
	}
	if p.o.ServiceAccount != "" {
		in.ServiceAccounts = []*compute.ServiceAccount{{Email: p.o.ServiceAccount, Scopes: []string{compute.CloudPlatformScope}}}
	}
	return in
}

// wait polls a zone operation to its end and returns its error.
func (p *Provider) wait(ctx context.Context, zone string, op *compute.Operation) error {
	delay := p.o.Poll
	for op.Status != "DONE" {
		select {
		case <-ctx.Done():
			return fmt.Errorf("operation %s: %w", op.Name, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
		next, err := p.svc.ZoneOperations.Wait(p.o.Project, zone, op.Name).Context(ctx).Do()
		if err != nil {
			return fmt.Errorf("wait for operation %s: %w", op.Name, err)
		}
		op = next
	}
	return operationError(op)
}

// get reads one instance.
func (p *Provider) get(ctx context.Context, zone, name string) (provider.Instance, error) {
	in, err := p.svc.Instances.Get(p.o.Project, zone, name).Context(ctx).Do()
	if err != nil {
		return provider.Instance{}, fmt.Errorf("get instance %s in %s: %w", name, zone, classify(err))
	}
	return p.instance(in), nil
}

// instance converts an API instance. GCE's TERMINATED is a stopped VM that
// still exists (the watchdog's shutdown): it is listed, not alive, so the
// reaper deletes it.
func (p *Provider) instance(in *compute.Instance) provider.Instance {
	zone := in.Zone[strings.LastIndexByte(in.Zone, '/')+1:]
	out := provider.Instance{ID: instanceID(zone, in.Name), Type: in.MachineType[strings.LastIndexByte(in.MachineType, '/')+1:], Zone: zone,
		Market: provider.OnDemand, Tags: map[string]string{}}
	if in.Scheduling != nil && in.Scheduling.ProvisioningModel == "SPOT" {
		out.Market = provider.Spot
	}
	switch in.Status {
	case "PROVISIONING", "STAGING":
		out.State = provider.Pending
	case "RUNNING":
		out.State = provider.Running
	default: // STOPPING, SUSPENDING, SUSPENDED, TERMINATED
		out.State = provider.ShuttingDown
	}
	if len(in.NetworkInterfaces) > 0 {
		nic := in.NetworkInterfaces[0]
		out.Addr = nic.NetworkIP
		if p.o.PublicIP && len(nic.AccessConfigs) > 0 && nic.AccessConfigs[0].NatIP != "" {
			out.Addr = nic.AccessConfigs[0].NatIP
		}
	}
	if in.Metadata != nil {
		for _, it := range in.Metadata.Items {
			if it.Key == tagsKey && it.Value != nil {
				_ = json.Unmarshal([]byte(*it.Value), &out.Tags)
			}
		}
	}
	out.Launched, _ = time.Parse(time.RFC3339, in.CreationTimestamp)
	return out
}

// WaitReady polls each instance until it runs with an address; one that
// stops or is deleted instead is an error.
func (p *Provider) WaitReady(ctx context.Context, ids []string) ([]provider.Instance, error) {
	var out []provider.Instance
	for _, id := range ids {
		zone, name, ok := splitID(id)
		if !ok {
			return nil, fmt.Errorf("wait for %s: %w: not a ZONE/NAME id", id, provider.ErrNotFound)
		}
		for delay := p.o.Poll; ; delay = min(2*delay, 10*time.Second) {
			in, err := p.get(ctx, zone, name)
			switch {
			case err != nil:
				return nil, fmt.Errorf("wait for %s: %w", id, err)
			case in.State == provider.Running && in.Addr != "":
				out = append(out, in)
			case in.State == provider.ShuttingDown:
				return nil, fmt.Errorf("wait for %s: it stopped as it booted", id)
			}
			if in.State == provider.Running && in.Addr != "" {
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("wait for %s to run: %w", id, ctx.Err())
			case <-time.After(delay):
			}
		}
	}
	return out, nil
}

// List returns the instances, not deleted, with every tag of tags: the
// labels select them, their exact tags (kept in metadata) decide.
func (p *Provider) List(ctx context.Context, tags map[string]string) ([]provider.Instance, error) {
	var terms []string
	for _, k := range slices.Sorted(maps.Keys(labels(tags))) {
		terms = append(terms, fmt.Sprintf("(labels.%s = %q)", k, labels(tags)[k]))
	}
	var out []provider.Instance
	for _, zone := range p.o.Zones {
		err := p.svc.Instances.List(p.o.Project, zone).Filter(strings.Join(terms, " ")).Pages(ctx, func(l *compute.InstanceList) error {
			for _, in := range l.Items {
				if i := p.instance(in); hasTags(i.Tags, tags) {
					out = append(out, i)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list instances in %s: %w", zone, classify(err))
		}
	}
	return out, nil
}

func hasTags(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// Terminate deletes the instances (it does not wait for the deletions);
// an instance already gone is no error.
func (p *Provider) Terminate(ctx context.Context, ids []string) error {
	var errs []error
	for _, id := range ids {
		zone, name, ok := splitID(id)
		if !ok {
			continue // not an instance of this provider: gone for it
		}
		_, err := p.svc.Instances.Delete(p.o.Project, zone, name).RequestId(requestID("delete", id)).Context(ctx).Do()
		if err = classify(err); err != nil && !errors.Is(err, provider.ErrNotFound) {
			errs = append(errs, fmt.Errorf("delete %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}
