// Package gceemu is an EMULATION of the few REST endpoints of Google
// Compute Engine's API (compute/v1) that cloudvm's gce provider uses, for
// tests and benchmarks that have no Google Cloud project and no network:
// an http.Handler that Google's official Go client
// (google.golang.org/api/compute/v1) is pointed at with
// option.WithEndpoint(url + "/compute/v1/") and option.WithoutAuthentication.
// It is not GCE and does not pretend to be beyond that: requests are not
// authenticated, and it answers only instances.insert (with its requestId,
// labels, metadata and SPOT scheduling), instances.get, instances.list
// (filtered by labels and status), instances.delete, and
// zoneOperations.get and wait, in the JSON shapes of the API reference; the
// client's own decoders are the judge of them.
//
// Behind instances.insert it starts real machines: each machine type maps
// to a type of a cloudemu.Backend (the local cloud in the tests, adapted by
// launchers/cloudvm/localcloud/localcloudtest; this package imports no
// launcher), which boot with the SSH keys of the instance's user-data
// metadata (a #cloud-config document). An instance is PROVISIONING until
// its sshd answers, then RUNNING; a spot instance the backend ends (a
// preemption) is deleted, as instanceTerminationAction DELETE asks.
//
// Faults can be injected (Faults): ZONE_RESOURCE_POOL_EXHAUSTED in chosen
// zones and QUOTA_EXCEEDED per provisioning model, each as the failed
// insert operation GCE answers with, and rateLimitExceeded (HTTP 403) for
// the next n requests.
package gceemu

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/scavenger-ml/scavenger/internal/cloudemu"
)

// Options configure an Emulator.
type Options struct {
	// Backend runs the instances; required.
	Backend cloudemu.Backend
	// Project is the only project it answers for.
	Project string
	// Types maps each machine type the emulation accepts to a type of the
	// backend ("e2-standard-2": "loc.half").
	Types map[string]string
	// Zones are the emulated zones; the backend's are used in the same
	// order (zone i is backend zone i).
	Zones, BackendZones []string
}

// Faults are the failures the emulator injects; SetFaults changes them.
type Faults struct {
	// NoCapacity lists the zones whose inserts fail with
	// ZONE_RESOURCE_POOL_EXHAUSTED.
	NoCapacity []string
	// Quota maps a provisioning model ("SPOT", "STANDARD") whose inserts
	// fail with QUOTA_EXCEEDED to the quota's name ("CPUS", "PREEMPTIBLE_CPUS").
	Quota map[string]string
	// Throttle fails the next Throttle requests with rateLimitExceeded.
	Throttle int
}

// Emulator is the emulated compute API.
type Emulator struct {
	o Options

	mu       sync.Mutex
	faults   Faults
	insts    map[string]*instance  // by zone/name
	ops      map[string]*operation // by name
	requests map[string]string     // requestId -> operation name
	calls    map[string]int        // requests by method name
}

// instance is an emulated instance: the API's resource and its machine.
type instance struct {
	json    map[string]any // the resource as inserted, completed
	zone    string
	name    string
	machine string // the backend's id
	addr    string
	spot    bool
	created time.Time
	deleted bool
}

// operation is a zone operation.
type operation struct {
	Kind          string          `json:"kind"`
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	Zone          string          `json:"zone"`
	OperationType string          `json:"operationType"`
	TargetLink    string          `json:"targetLink"`
	Status        string          `json:"status"`
	Progress      int             `json:"progress"`
	InsertTime    string          `json:"insertTime"`
	SelfLink      string          `json:"selfLink"`
	Error         *operationError `json:"error,omitempty"`
}

type operationError struct {
	Errors []errorItem `json:"errors"`
}

type errorItem struct {
	Code    string `json:"code,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Domain  string `json:"domain,omitempty"`
	Message string `json:"message"`
}

// New makes an emulator.
func New(o Options) (*Emulator, error) {
	if o.Backend == nil || o.Project == "" || len(o.Types) == 0 || len(o.Zones) == 0 || len(o.Zones) != len(o.BackendZones) {
		return nil, fmt.Errorf("new GCE emulator: want a backend, a project, types, and as many zones as backend zones: %+v", o)
	}
	return &Emulator{o: o, insts: map[string]*instance{}, ops: map[string]*operation{}, requests: map[string]string{}, calls: map[string]int{}}, nil
}

// SetFaults sets the faults to inject from now on.
func (e *Emulator) SetFaults(f Faults) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = f
}

// Calls returns how many requests of method ("instances.insert", ...)
// were answered, faults included.
func (e *Emulator) Calls(method string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[method]
}

// Instances lists every instance inserted, deleted ones included, with
// the backend's machine id as ID and "zone/name" as Tags["gce"].
func (e *Emulator) Instances() []cloudemu.Instance {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []cloudemu.Instance
	for _, in := range e.insts {
		c := cloudemu.Instance{ID: in.machine, Zone: in.zone, Market: cloudemu.OnDemand, State: e.statusLocked(in), Addr: in.addr,
			Tags: map[string]string{"gce": in.zone + "/" + in.name}, Launched: in.created}
		if in.spot {
			c.Market = cloudemu.Spot
		}
		c.Type, _ = in.json["machineType"].(string)
		c.Type = c.Type[strings.LastIndexByte(c.Type, '/')+1:]
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b cloudemu.Instance) int { return a.Launched.Compare(b.Launched) })
	return out
}

// ServeHTTP answers one request of the compute/v1 REST API, or of the
// OAuth 2.0 token endpoint (POST /token) a service account key made by
// ServiceAccountKey names.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/token" {
		token(w, r)
		return
	}
	parts := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, "/compute/v1/"), "/"), "/")
	// projects/P/zones/Z/(instances[/NAME]|operations/OP[/wait])
	if len(parts) < 5 || parts[0] != "projects" || parts[2] != "zones" {
		writeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The requested URL %s was not found (this emulation answers instances and zoneOperations).", r.URL.Path))
		return
	}
	if parts[1] != e.o.Project {
		writeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The resource 'projects/%s' was not found", parts[1]))
		return
	}
	zone := parts[3]
	if !slices.Contains(e.o.Zones, zone) {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'zone': '%s'. Unknown zone.", zone))
		return
	}
	method := methodOf(r.Method, parts[4:])
	e.mu.Lock()
	e.calls[method]++
	throttled := e.faults.Throttle > 0
	if throttled {
		e.faults.Throttle--
	}
	e.mu.Unlock()
	if throttled {
		writeError(w, http.StatusForbidden, "rateLimitExceeded", "Rate Limit Exceeded (emulated)")
		return
	}
	switch method {
	case "instances.insert":
		e.insert(w, r, zone)
	case "instances.list":
		e.list(w, r, zone)
	case "instances.get":
		e.get(w, zone, parts[5])
	case "instances.delete":
		e.delete(w, r, zone, parts[5])
	case "zoneOperations.get", "zoneOperations.wait":
		e.operation(w, parts[5])
	default:
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("%s %s is not answered by this emulation", r.Method, r.URL.Path))
	}
}

// methodOf names the API method of a request on the path after the zone.
func methodOf(verb string, rest []string) string {
	switch {
	case rest[0] == "instances" && len(rest) == 1 && verb == http.MethodPost:
		return "instances.insert"
	case rest[0] == "instances" && len(rest) == 1 && verb == http.MethodGet:
		return "instances.list"
	case rest[0] == "instances" && len(rest) == 2 && verb == http.MethodGet:
		return "instances.get"
	case rest[0] == "instances" && len(rest) == 2 && verb == http.MethodDelete:
		return "instances.delete"
	case rest[0] == "operations" && len(rest) == 2 && verb == http.MethodGet:
		return "zoneOperations.get"
	case rest[0] == "operations" && len(rest) == 3 && rest[2] == "wait" && verb == http.MethodPost:
		return "zoneOperations.wait"
	}
	return verb + " " + strings.Join(rest, "/")
}

// writeError answers an error in the API's JSON shape.
func writeError(w http.ResponseWriter, status int, reason, msg string) {
	domain := "global"
	if reason == "rateLimitExceeded" {
		domain = "usageLimits"
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": status, "message": msg,
		"errors": []errorItem{{Message: msg, Domain: domain, Reason: reason}}}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_ = json.NewEncoder(w).Encode(v)
}

// newID is a numeric resource id, as GCE's.
func newID() string {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n.String()
}

func (e *Emulator) zoneURL(zone string) string {
	return "https://compute.googleapis.com/compute/v1/projects/" + e.o.Project + "/zones/" + zone
}
