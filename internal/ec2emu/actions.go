package ec2emu

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/internal/cloudemu"
)

// ownerID is the account of every emulated reservation.
const ownerID = "000000000000"

// list reads the members of a Query API list parameter: prefix.1, prefix.2, ...
func list(f url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := f[prefix+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

// tags reads the instance tags of a RunInstances request's tag specifications.
func tags(f url.Values) map[string]string {
	out := map[string]string{}
	for i := 1; ; i++ {
		p := "TagSpecification." + strconv.Itoa(i)
		rt, ok := f[p+".ResourceType"]
		if !ok {
			return out
		}
		if rt[0] != "instance" {
			continue
		}
		for j := 1; ; j++ {
			k, ok := f[p+".Tag."+strconv.Itoa(j)+".Key"]
			if !ok {
				break
			}
			out[k[0]] = f.Get(p + ".Tag." + strconv.Itoa(j) + ".Value")
		}
	}
}

func (e *Emulator) runInstances(ctx context.Context, f url.Values) (any, *apiError) {
	bad := func(format string, a ...any) *apiError {
		return &apiError{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf(format, a...)}
	}
	typ := f.Get("InstanceType")
	backendType, ok := e.o.Types[typ]
	if !ok {
		return nil, bad("The instance type %q is not offered by this emulation (it has %v).", typ, e.o.Types)
	}
	minC, _ := strconv.Atoi(f.Get("MinCount"))
	maxC, _ := strconv.Atoi(f.Get("MaxCount"))
	if minC < 1 || maxC != minC {
		return nil, bad("MinCount %q and MaxCount %q: this emulation launches MinCount = MaxCount >= 1.", f.Get("MinCount"), f.Get("MaxCount"))
	}
	zone := f.Get("Placement.AvailabilityZone")
	zi := slices.Index(e.o.Zones, zone)
	if zi < 0 {
		return nil, bad("Placement.AvailabilityZone %q: the zones are %v (subnets are not emulated).", zone, e.o.Zones)
	}
	market := cloudemu.OnDemand
	if f.Get("InstanceMarketOptions.MarketType") == "spot" {
		market = cloudemu.Spot
	}
	boot, err := bootFromUserData(f.Get("UserData"))
	if err != nil {
		return nil, bad("%v", err)
	}
	token := f.Get("ClientToken")
	e.mu.Lock()
	if ids, seen := e.tokens[token]; seen && token != "" {
		resp := e.reservationLocked(ids)
		e.mu.Unlock()
		return runInstancesResponse{Xmlns: xmlns, RequestID: newID("req-"), reservationXML: resp}, nil
	}
	full := slices.Contains(e.faults.NoCapacity, zone)
	refused := e.faults.Refuse[market]
	e.mu.Unlock()
	if refused != "" {
		msg, ok := quotaMessages[refused]
		if !ok {
			msg = "refused (emulated)"
		}
		return nil, &apiError{http.StatusBadRequest, refused, msg}
	}
	if full {
		return nil, &apiError{http.StatusInternalServerError, "InsufficientInstanceCapacity",
			fmt.Sprintf("We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). (emulated)", typ, zone)}
	}
	var maxPrice float64
	if s := f.Get("InstanceMarketOptions.SpotOptions.MaxPrice"); s != "" {
		maxPrice, _ = strconv.ParseFloat(s, 64)
	}
	ms, perr := e.o.Backend.Launch(ctx, cloudemu.Launch{Type: backendType, Count: minC, Market: market, Zone: e.o.BackendZones[zi],
		Tags: tags(f), Token: "ec2emu-" + token, MaxPriceUSD: maxPrice, Keys: boot})
	if perr != nil {
		if len(ms) > 0 {
			var ids []string
			for _, m := range ms {
				ids = append(ids, m.ID)
			}
			_ = e.o.Backend.Terminate(context.WithoutCancel(ctx), ids)
		}
		if errors.Is(perr, cloudemu.ErrNoCapacity) {
			return nil, &apiError{http.StatusInternalServerError, "InsufficientInstanceCapacity", perr.Error()}
		}
		return nil, &apiError{http.StatusInternalServerError, "InternalError", perr.Error()}
	}
	reservation := newID("r-")
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for _, m := range ms {
		in := cloudemu.Instance{ID: m.ID, Type: typ, Zone: zone, Market: market, State: cloudemu.Pending, Addr: m.Addr, Tags: tags(f), Launched: m.Launched}
		e.insts[m.ID] = &instance{Instance: in, reservation: reservation, token: token, image: f.Get("ImageId"), backendZone: e.o.BackendZones[zi]}
		ids = append(ids, m.ID)
	}
	if token != "" {
		e.tokens[token] = ids
	}
	return runInstancesResponse{Xmlns: xmlns, RequestID: newID("req-"), reservationXML: e.reservationLocked(ids)}, nil
}

// reservationLocked describes instances ids as one reservation (e.mu held).
func (e *Emulator) reservationLocked(ids []string) reservationXML {
	r := reservationXML{OwnerID: ownerID}
	for _, id := range ids {
		in := e.insts[id]
		r.ReservationID = in.reservation
		r.Instances = append(r.Instances, e.describeLocked(in))
	}
	return r
}

// describeLocked is one instance's description, pending until its machine
// answers SSH (e.mu held).
func (e *Emulator) describeLocked(in *instance) instanceXML {
	if in.State != cloudemu.Terminated && !e.o.Backend.Ended(in.ID).IsZero() {
		in.State = cloudemu.Terminated // the backend ended it: a spot interruption
	}
	if in.State == cloudemu.Pending && cloudemu.SSHAnswers(in.Addr) {
		in.State = cloudemu.Running
	}
	x := instanceXML{InstanceID: in.ID, ImageID: in.image, State: state{stateCodes[in.State], in.State}, InstanceType: in.Type,
		LaunchTime: isoTime(in.Launched), Placement: placement{in.Zone}, ClientToken: in.token}
	if in.State != cloudemu.Terminated {
		x.PrivateIPAddress = in.Addr
	}
	if in.Market == cloudemu.Spot {
		x.InstanceLifecycle = "spot"
	}
	for k, v := range in.Tags {
		x.Tags = append(x.Tags, tag{k, v})
	}
	slices.SortFunc(x.Tags, func(a, b tag) int { return strings.Compare(a.Key, b.Key) })
	return x
}

// filter is one DescribeInstances filter.
type filter struct {
	name   string
	values []string
}

func filters(f url.Values) []filter {
	var out []filter
	for i := 1; ; i++ {
		p := "Filter." + strconv.Itoa(i)
		name, ok := f[p+".Name"]
		if !ok {
			return out
		}
		out = append(out, filter{name[0], list(f, p+".Value")})
	}
}

// matches reports whether in passes every filter (tag:KEY and
// instance-state-name; other filters are refused by describeInstances).
func matches(in *instance, fs []filter) bool {
	for _, fl := range fs {
		var have string
		if k, ok := strings.CutPrefix(fl.name, "tag:"); ok {
			v, set := in.Tags[k]
			if !set {
				return false
			}
			have = v
		} else {
			have = in.State
		}
		if !slices.Contains(fl.values, have) {
			return false
		}
	}
	return true
}

func (e *Emulator) describeInstances(f url.Values) (any, *apiError) {
	ids, fs := list(f, "InstanceId"), filters(f)
	for _, fl := range fs {
		if !strings.HasPrefix(fl.name, "tag:") && fl.name != "instance-state-name" {
			return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The filter %q is not supported by this emulation.", fl.name)}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	byRes := map[string]*reservationXML{}
	var order []string
	add := func(in *instance) {
		r := byRes[in.reservation]
		if r == nil {
			r = &reservationXML{ReservationID: in.reservation, OwnerID: ownerID}
			byRes[in.reservation] = r
			order = append(order, in.reservation)
		}
		r.Instances = append(r.Instances, e.describeLocked(in))
	}
	if len(ids) > 0 {
		for _, id := range ids {
			in := e.insts[id]
			if in == nil || time.Since(in.Launched) < e.faults.NotFoundFor {
				return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", id)}
			}
			if e.describeLocked(in); matches(in, fs) {
				add(in)
			}
		}
	} else {
		for _, in := range e.sortedLocked() {
			if e.describeLocked(in); matches(in, fs) {
				add(in)
			}
		}
	}
	resp := describeInstancesResponse{Xmlns: xmlns, RequestID: newID("req-")}
	for _, r := range order {
		resp.Reservations = append(resp.Reservations, *byRes[r])
	}
	return resp, nil
}

func (e *Emulator) sortedLocked() []*instance {
	var out []*instance
	for _, in := range e.insts {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b *instance) int { return a.Launched.Compare(b.Launched) })
	return out
}

func (e *Emulator) terminateInstances(ctx context.Context, f url.Values) (any, *apiError) {
	ids := list(f, "InstanceId")
	e.mu.Lock()
	var unknown []string
	for _, id := range ids {
		if e.insts[id] == nil {
			unknown = append(unknown, id)
		}
	}
	e.mu.Unlock()
	switch len(unknown) { // the whole batch is refused, as EC2 does
	case 0:
	case 1:
		return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", unknown[0])}
	default:
		return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance IDs '%s' do not exist", strings.Join(unknown, ", "))}
	}
	if err := e.o.Backend.Terminate(ctx, ids); err != nil {
		return nil, &apiError{http.StatusInternalServerError, "InternalError", err.Error()}
	}
	resp := terminateInstancesResponse{Xmlns: xmlns, RequestID: newID("req-")}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		in := e.insts[id]
		prev := in.State
		in.State = cloudemu.Terminated
		resp.Changes = append(resp.Changes, stateChange{InstanceID: id, CurrentState: state{stateCodes["shutting-down"], "shutting-down"},
			PreviousState: state{stateCodes[prev], prev}})
	}
	return resp, nil
}

// describeSpotPriceHistory answers the prices in effect between StartTime
// and EndTime (default: now), each from when it was set, newest first, as
// EC2 does: the price in effect at StartTime comes with the changes after it.
func (e *Emulator) describeSpotPriceHistory(f url.Values) (any, *apiError) {
	types := list(f, "InstanceType")
	if len(types) == 0 {
		for t := range e.o.SpotPrices {
			types = append(types, t)
		}
		slices.Sort(types)
	}
	now := time.Now().UTC()
	from, to := now, now
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"StartTime", &from}, {"EndTime", &to}} {
		if v := f.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("%s %q is not an ISO 8601 time.", p.name, v)}
			}
			*p.t = t
		}
	}
	zone := f.Get("AvailabilityZone")
	resp := describeSpotPriceHistoryResponse{Xmlns: xmlns, RequestID: newID("req-")}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range types {
		for _, z := range e.o.Zones {
			pts := e.spot[[2]string{t, z}]
			if len(pts) == 0 || zone != "" && z != zone {
				continue
			}
			for i := len(pts) - 1; i >= 0; i-- {
				p := pts[i]
				if p.at.After(to) {
					continue
				}
				resp.Prices = append(resp.Prices, spotPriceXML{InstanceType: t, ProductDescription: "Linux/UNIX",
					SpotPrice: strconv.FormatFloat(p.usd, 'f', 6, 64), Timestamp: isoTime(p.at), AvailabilityZone: z})
				if !p.at.After(from) {
					break // the price in effect at StartTime
				}
			}
		}
	}
	return resp, nil
}
