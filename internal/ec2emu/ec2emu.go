// Package ec2emu is an EMULATION of a small part of Amazon EC2's Query API,
// for tests and benchmarks that have no AWS account and no network: an
// http.Handler that the real AWS SDK (aws-sdk-go-v2/service/ec2) is pointed
// at with its BaseEndpoint. It is not AWS and does not pretend to be
// beyond that: requests are not authenticated (their SigV4 signature is
// not checked), and it answers only the actions cloudvm's aws provider
// uses — RunInstances (on-demand and spot market options, tag
// specifications, ClientToken, user data), DescribeInstances (instance ids,
// tag and state filters), TerminateInstances and DescribeSpotPriceHistory
// — in the XML shapes of the EC2 API reference (2016-11-15); the SDK's own
// deserialisers are the judge of them.
//
// Behind RunInstances it starts real machines: each instance type maps to a
// type of a cloudemu.Backend (the local cloud in the tests, adapted by
// launchers/cloudvm/localcloud/localcloudtest; this package imports no
// launcher), whose
// instances boot with the SSH keys of the request's cloud-init user data,
// so that the AWS code path provisions machines that really run the
// workers. An instance is pending until its sshd answers, then running.
//
// Faults can be injected (Faults): InsufficientInstanceCapacity in chosen
// zones, RequestLimitExceeded for the next n requests (or the next n
// DescribeInstances by id, the running waiter's), the quota errors a new
// account meets (VcpuLimitExceeded, InstanceLimitExceeded,
// MaxSpotInstanceCountExceeded) per market, and InvalidInstanceID.NotFound
// for instances described right after their launch, as EC2's eventual
// consistency does. TerminateInstances refuses a whole batch that names an
// unknown instance, as EC2 does. Spot prices have a history (SetSpotPrice),
// which DescribeSpotPriceHistory answers over its StartTime and EndTime.
package ec2emu

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/scavenger-ml/scavenger/internal/cloudemu"
)

// Options configure an Emulator.
type Options struct {
	// Backend runs the instances; required.
	Backend cloudemu.Backend
	// Types maps each EC2 instance type the emulation accepts to a type of
	// the backend ("c6i.large": "loc.half").
	Types map[string]string
	// Zones are the availability zones of the emulated region; the
	// backend's zones are used in the same order (zone i is backend zone i).
	Zones, BackendZones []string
	// SpotPrices are $/hour by instance type and zone, as
	// DescribeSpotPriceHistory reports them, from New on (SetSpotPrice
	// changes them).
	SpotPrices map[string]map[string]float64
}

// Faults are the failures the emulator injects; Emulator.SetFaults changes them.
type Faults struct {
	// NoCapacity lists the zones where RunInstances fails with
	// InsufficientInstanceCapacity.
	NoCapacity []string
	// Throttle fails the next Throttle requests, of any action, with
	// RequestLimitExceeded.
	Throttle int
	// ThrottleWait fails the next ThrottleWait DescribeInstances that name
	// instance ids (the running waiter's) with RequestLimitExceeded.
	ThrottleWait int
	// Refuse maps a market ("spot", "on-demand") to the error code every
	// RunInstances in it fails with: a quota error such as
	// VcpuLimitExceeded, InstanceLimitExceeded or MaxSpotInstanceCountExceeded.
	Refuse map[string]string
	// NotFoundFor answers InvalidInstanceID.NotFound when an instance is
	// described by id within this long of its launch.
	NotFoundFor time.Duration
}

// quotaMessages are EC2's messages of the quota errors Refuse can inject.
var quotaMessages = map[string]string{
	"VcpuLimitExceeded":            "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit. (emulated)",
	"InstanceLimitExceeded":        "You have requested more instances (1) than your current instance limit of 0 allows for the specified instance type. (emulated)",
	"MaxSpotInstanceCountExceeded": "Max spot instance count exceeded (emulated)",
}

// spotPoint is a spot price from a time on.
type spotPoint struct {
	at  time.Time
	usd float64
}

// Emulator is the emulated EC2 endpoint.
type Emulator struct {
	o Options

	mu     sync.Mutex
	faults Faults
	insts  map[string]*instance      // by instance id
	tokens map[string][]string       // client token -> instance ids
	calls  map[string]int            // requests by action
	spot   map[[2]string][]spotPoint // by type and zone, oldest first
}

// instance is an emulated instance.
type instance struct {
	cloudemu.Instance
	reservation string
	token       string
	image       string
	backendZone string
}

// New makes an emulator.
func New(o Options) (*Emulator, error) {
	if o.Backend == nil || len(o.Types) == 0 || len(o.Zones) == 0 || len(o.Zones) != len(o.BackendZones) {
		return nil, fmt.Errorf("new EC2 emulator: want a backend, types, and as many zones as backend zones: %+v", o)
	}
	e := &Emulator{o: o, insts: map[string]*instance{}, tokens: map[string][]string{}, calls: map[string]int{}, spot: map[[2]string][]spotPoint{}}
	start := time.Now().Add(-time.Hour) // the prices were in effect before the emulation began
	for typ, zones := range o.SpotPrices {
		for zone, usd := range zones {
			e.spot[[2]string{typ, zone}] = []spotPoint{{start, usd}}
		}
	}
	return e, nil
}

// SetSpotPrice changes the spot price of typ in zone from now on.
func (e *Emulator) SetSpotPrice(typ, zone string, usd float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := [2]string{typ, zone}
	e.spot[k] = append(e.spot[k], spotPoint{time.Now().UTC(), usd})
}

// SetFaults sets the faults to inject from now on.
func (e *Emulator) SetFaults(f Faults) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = f
}

// Calls returns how many requests of action were answered, faults included.
func (e *Emulator) Calls(action string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[action]
}

// Instances returns every instance launched, terminated ones included.
func (e *Emulator) Instances() []cloudemu.Instance {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []cloudemu.Instance
	for _, in := range e.insts {
		out = append(out, in.Instance)
	}
	slices.SortFunc(out, func(a, b cloudemu.Instance) int { return a.Launched.Compare(b.Launched) })
	return out
}

// ServeHTTP answers one Query API request (form-encoded POST, as the SDK sends).
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "MalformedQueryString", err.Error())
		return
	}
	action := r.Form.Get("Action")
	e.mu.Lock()
	e.calls[action]++
	throttled := e.faults.Throttle > 0
	if throttled {
		e.faults.Throttle--
	}
	if !throttled && action == "DescribeInstances" && len(list(r.Form, "InstanceId")) > 0 && e.faults.ThrottleWait > 0 {
		throttled = true
		e.faults.ThrottleWait--
	}
	e.mu.Unlock()
	if throttled {
		writeError(w, http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded.")
		return
	}
	var resp any
	var err *apiError
	switch action {
	case "RunInstances":
		resp, err = e.runInstances(r.Context(), r.Form)
	case "DescribeInstances":
		resp, err = e.describeInstances(r.Form)
	case "TerminateInstances":
		resp, err = e.terminateInstances(r.Context(), r.Form)
	case "DescribeSpotPriceHistory":
		resp, err = e.describeSpotPriceHistory(r.Form)
	default:
		err = &apiError{http.StatusBadRequest, "InvalidAction", fmt.Sprintf("The action %q is not valid for this web service (this is an emulation: it answers RunInstances, DescribeInstances, TerminateInstances and DescribeSpotPriceHistory).", action)}
	}
	if err != nil {
		writeError(w, err.status, err.code, err.msg)
		return
	}
	writeXML(w, resp)
}

// apiError is an EC2 error answer.
type apiError struct {
	status    int
	code, msg string
}

func newID(prefix string) string {
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)[:17]
}
