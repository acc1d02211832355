package gceemu

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/scavenger-ml/scavenger/internal/cloudemu"
)

// fakeBackend launches nothing: it records launches and makes up machines.
type fakeBackend struct {
	mu       sync.Mutex
	launches []cloudemu.Launch
	ended    map[string]time.Time
}

func (f *fakeBackend) Launch(_ context.Context, l cloudemu.Launch) ([]cloudemu.Machine, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.launches = append(f.launches, l)
	return []cloudemu.Machine{{ID: fmt.Sprintf("m-%d", len(f.launches)), Addr: "192.0.2.1", Launched: time.Now().UTC()}}, nil
}

func (f *fakeBackend) Terminate(_ context.Context, ids []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.ended[id] = time.Now()
	}
	return nil
}

func (f *fakeBackend) Ended(id string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended[id]
}

const userData = "#cloud-config\nssh_authorized_keys:\n  - ssh-ed25519 AAAA client\nssh_keys:\n  ed25519_private: |\n    -----BEGIN OPENSSH PRIVATE KEY-----\n    abc\n    -----END OPENSSH PRIVATE KEY-----\n  ed25519_public: ssh-ed25519 BBBB host\n"

// TestWithTheClient drives the emulation with Google's compute/v1 client:
// a SPOT insert with labels, user-data and a requestId (repeated: the same
// operation, no second machine), the operation polled to DONE, get, a
// label-filtered list, delete, and the injected faults as the client
// decodes them.
func TestWithTheClient(t *testing.T) {
	back := &fakeBackend{ended: map[string]time.Time{}}
	e, err := New(Options{Backend: back, Project: "p", Types: map[string]string{"e2-standard-2": "small"}, Zones: []string{"us-central1-a"}, BackendZones: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	defer srv.Close()
	ctx := context.Background()
	svc, err := compute.NewService(ctx, option.WithEndpoint(srv.URL+"/compute/v1/"), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	ud := userData
	in := &compute.Instance{Name: "scav-1", MachineType: "zones/us-central1-a/machineTypes/e2-standard-2", Labels: map[string]string{"scavenger-job": "j"},
		Metadata:   &compute.Metadata{Items: []*compute.MetadataItems{{Key: "user-data", Value: &ud}}},
		Scheduling: &compute.Scheduling{ProvisioningModel: "SPOT", InstanceTerminationAction: "DELETE"}}
	op, err := svc.Instances.Insert("p", "us-central1-a", in).RequestId("0b8f6f1e-6a1c-5d2e-8f00-000000000001").Do()
	if err != nil || op.Status != "RUNNING" {
		t.Fatalf("insert = %+v, %v", op, err)
	}
	again, err := svc.Instances.Insert("p", "us-central1-a", in).RequestId("0b8f6f1e-6a1c-5d2e-8f00-000000000001").Do()
	if err != nil || again.Name != op.Name || len(back.launches) != 1 {
		t.Fatalf("the same requestId: %+v, %v (%d launches)", again, err, len(back.launches))
	}
	if l := back.launches[0]; l.Market != cloudemu.Spot || l.Zone != "a" || l.Tags["scavenger-job"] != "j" || l.Keys.HostKeyPublic != "ssh-ed25519 BBBB host" {
		t.Errorf("launch %+v", l)
	}
	done, err := svc.ZoneOperations.Wait("p", "us-central1-a", op.Name).Do()
	if err != nil || done.Status != "DONE" || done.Error != nil {
		t.Fatalf("wait = %+v, %v", done, err)
	}
	got, err := svc.Instances.Get("p", "us-central1-a", "scav-1").Do()
	if err != nil || got.Status != "PROVISIONING" || got.Scheduling.ProvisioningModel != "SPOT" || got.NetworkInterfaces[0].NetworkIP != "192.0.2.1" {
		t.Fatalf("get = %+v, %v", got, err)
	}
	list, err := svc.Instances.List("p", "us-central1-a").Filter(`(labels.scavenger-job = "j") (labels.other = "x")`).Do()
	if err != nil || len(list.Items) != 0 {
		t.Errorf("list by a label no instance has = %+v, %v", list, err)
	}
	list, err = svc.Instances.List("p", "us-central1-a").Filter(`labels.scavenger-job = "j" AND status != "TERMINATED"`).Do()
	if err != nil || len(list.Items) != 1 {
		t.Errorf("list = %+v, %v", list, err)
	}
	if _, err := svc.Instances.Insert("p", "us-central1-a", in).Do(); code(err) != "409 alreadyExists" {
		t.Errorf("insert of an existing name: %v", err)
	}
	if _, err := svc.Instances.Delete("p", "us-central1-a", "scav-1").Do(); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Instances.Get("p", "us-central1-a", "scav-1").Do(); code(err) != "404 notFound" {
		t.Errorf("get after delete: %v", err)
	}
	e.SetFaults(Faults{NoCapacity: []string{"us-central1-a"}, Throttle: 1, Quota: map[string]string{"SPOT": "PREEMPTIBLE_CPUS"}})
	if _, err := svc.Instances.List("p", "us-central1-a").Do(); code(err) != "403 rateLimitExceeded" {
		t.Errorf("throttled: %v", err)
	}
	in.Name = "scav-2"
	op, _ = svc.Instances.Insert("p", "us-central1-a", in).Do()
	if done, err := svc.ZoneOperations.Get("p", "us-central1-a", op.Name).Do(); err != nil || done.Error == nil || done.Error.Errors[0].Code != "ZONE_RESOURCE_POOL_EXHAUSTED" {
		t.Errorf("insert in a zone without capacity: %+v, %v", done, err)
	}
	e.SetFaults(Faults{Quota: map[string]string{"SPOT": "PREEMPTIBLE_CPUS"}})
	op, _ = svc.Instances.Insert("p", "us-central1-a", in).Do()
	if done, err := svc.ZoneOperations.Get("p", "us-central1-a", op.Name).Do(); err != nil || done.Error == nil || done.Error.Errors[0].Code != "QUOTA_EXCEEDED" ||
		!strings.Contains(done.Error.Errors[0].Message, "PREEMPTIBLE_CPUS") {
		t.Errorf("insert without spot quota: %+v, %v", done, err)
	}
	if _, err := svc.Instances.List("p", "us-central1-a").Filter(`name = "x"`).Do(); code(err) != "400 invalid" {
		t.Errorf("a filter the emulation does not answer: %v", err)
	}
}

// code is an API error's status and first reason.
func code(err error) string {
	var ge *googleapi.Error
	if errors.As(err, &ge) && len(ge.Errors) > 0 {
		return fmt.Sprintf("%d %s", ge.Code, ge.Errors[0].Reason)
	}
	return fmt.Sprint(err)
}

// TestApplicationDefaultCredentials: a client that authenticates as in
// production, with a service account key file (GOOGLE_APPLICATION_CREDENTIALS),
// works against the emulation, whose key names its token endpoint.
func TestApplicationDefaultCredentials(t *testing.T) {
	e, err := New(Options{Backend: &fakeBackend{ended: map[string]time.Time{}}, Project: "p", Types: map[string]string{"e2-standard-2": "small"},
		Zones: []string{"us-central1-a"}, BackendZones: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	defer srv.Close()
	key, err := ServiceAccountKey(srv.URL, "p")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(path, key, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", path)
	svc, err := compute.NewService(context.Background(), option.WithEndpoint(srv.URL+"/compute/v1/"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Instances.List("p", "us-central1-a").Do(); err != nil {
		t.Fatalf("list with application default credentials: %v", err)
	}
}
