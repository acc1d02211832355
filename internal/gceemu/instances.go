package gceemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/internal/cloudemu"
)

// nameRE is GCE's rule for a resource name.
var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

// insertBody is the part of an inserted Instance the emulation reads.
type insertBody struct {
	Name        string            `json:"name"`
	MachineType string            `json:"machineType"`
	Labels      map[string]string `json:"labels"`
	Metadata    struct {
		Items []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"items"`
	} `json:"metadata"`
	Scheduling struct {
		ProvisioningModel         string `json:"provisioningModel"`
		InstanceTerminationAction string `json:"instanceTerminationAction"`
	} `json:"scheduling"`
}

func (e *Emulator) insert(w http.ResponseWriter, r *http.Request, zone string) {
	var raw map[string]any
	var b insertBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	if err := dec.Decode(&raw); err != nil {
		writeError(w, http.StatusBadRequest, "parseError", "Parse Error: "+err.Error())
		return
	}
	rb, _ := json.Marshal(raw)
	_ = json.Unmarshal(rb, &b)
	typ := b.MachineType[strings.LastIndexByte(b.MachineType, '/')+1:]
	backendType, ok := e.o.Types[typ]
	model := b.Scheduling.ProvisioningModel
	switch {
	case !nameRE.MatchString(b.Name):
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.name': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", b.Name))
		return
	case !ok:
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.machineType': '%s'. This emulation offers %v.", b.MachineType, slices.Sorted(maps.Keys(e.o.Types))))
		return
	case model != "" && model != "STANDARD" && model != "SPOT":
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field 'resource.scheduling.provisioningModel': '%s'.", model))
		return
	}
	var userData string
	for _, it := range b.Metadata.Items {
		if it.Key == "user-data" {
			userData = it.Value
		}
	}
	keys, err := cloudemu.KeysFromCloudConfig(userData)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "metadata user-data: "+err.Error())
		return
	}
	reqID := r.URL.Query().Get("requestId")
	target := e.zoneURL(zone) + "/instances/" + b.Name
	e.mu.Lock()
	if op, seen := e.requests[reqID]; seen && reqID != "" {
		resp := *e.ops[op]
		e.mu.Unlock()
		writeJSON(w, resp)
		return
	}
	if in := e.insts[zone+"/"+b.Name]; in != nil && !in.deleted {
		e.mu.Unlock()
		writeError(w, http.StatusConflict, "alreadyExists", fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' already exists", e.o.Project, zone, b.Name))
		return
	}
	fault := e.insertFaultLocked(zone, model)
	e.mu.Unlock()
	if fault == nil {
		fault = e.launch(r.Context(), zone, backendType, b, raw, keys)
	}
	e.mu.Lock()
	op := e.newOperationLocked(zone, "insert", target, fault)
	if reqID != "" {
		e.requests[reqID] = op.Name
	}
	resp := *op
	resp.Status, resp.Progress = "RUNNING", 0 // the client polls the operation to its end
	e.mu.Unlock()
	writeJSON(w, resp)
}

// insertFaultLocked is the injected failure of an insert in zone, if any (e.mu held).
func (e *Emulator) insertFaultLocked(zone, model string) *errorItem {
	if slices.Contains(e.faults.NoCapacity, zone) {
		return &errorItem{Code: "ZONE_RESOURCE_POOL_EXHAUSTED", Message: fmt.Sprintf("The zone 'projects/%s/zones/%s' does not have enough resources available to fulfill the request.  Try a different zone, or try again later. (emulated)", e.o.Project, zone)}
	}
	if model == "" {
		model = "STANDARD"
	}
	if q := e.faults.Quota[model]; q != "" {
		return &errorItem{Code: "QUOTA_EXCEEDED", Message: fmt.Sprintf("Quota '%s' exceeded.  Limit: 0.0 in region %s. (emulated)", q, regionOf(zone))}
	}
	return nil
}

// launch starts the instance's machine and records it; the error item is
// the insert operation's failure.
func (e *Emulator) launch(ctx context.Context, zone, backendType string, b insertBody, raw map[string]any, keys cloudemu.Keys) *errorItem {
	spot := b.Scheduling.ProvisioningModel == "SPOT"
	market := cloudemu.OnDemand
	if spot {
		market = cloudemu.Spot
	}
	zi := slices.Index(e.o.Zones, zone)
	ms, err := e.o.Backend.Launch(ctx, cloudemu.Launch{Type: backendType, Zone: e.o.BackendZones[zi], Market: market, Count: 1,
		Token: "gceemu-" + zone + "/" + b.Name, Tags: maps.Clone(b.Labels), Keys: keys})
	switch {
	case errors.Is(err, cloudemu.ErrNoCapacity):
		return &errorItem{Code: "ZONE_RESOURCE_POOL_EXHAUSTED", Message: err.Error()}
	case err != nil:
		return &errorItem{Code: "INTERNAL_ERROR", Message: err.Error()}
	}
	m := ms[0]
	raw["id"] = newID()
	raw["kind"] = "compute#instance"
	raw["zone"] = e.zoneURL(zone)
	raw["machineType"] = e.zoneURL(zone) + "/machineTypes/" + b.MachineType[strings.LastIndexByte(b.MachineType, '/')+1:]
	raw["selfLink"] = e.zoneURL(zone) + "/instances/" + b.Name
	raw["creationTimestamp"] = m.Launched.Format("2006-01-02T15:04:05.000-07:00")
	e.mu.Lock()
	defer e.mu.Unlock()
	e.insts[zone+"/"+b.Name] = &instance{json: raw, zone: zone, name: b.Name, machine: m.ID, addr: m.Addr, spot: spot, created: m.Launched}
	return nil
}

// newOperationLocked records a finished operation (e.mu held).
func (e *Emulator) newOperationLocked(zone, kind, target string, fault *errorItem) *operation {
	name := "operation-" + newID()
	op := &operation{Kind: "compute#operation", ID: newID(), Name: name, Zone: e.zoneURL(zone), OperationType: kind, TargetLink: target,
		Status: "DONE", Progress: 100, InsertTime: time.Now().Format(time.RFC3339), SelfLink: e.zoneURL(zone) + "/operations/" + name}
	if fault != nil {
		op.Error = &operationError{Errors: []errorItem{*fault}}
	}
	e.ops[name] = op
	return op
}

func (e *Emulator) operation(w http.ResponseWriter, name string) {
	e.mu.Lock()
	op := e.ops[name]
	var resp operation
	if op != nil {
		resp = *op
	}
	e.mu.Unlock()
	if op == nil {
		writeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The resource 'operations/%s' was not found", name))
		return
	}
	writeJSON(w, resp)
}

// statusLocked is in's status now: PROVISIONING until its sshd answers;
// TERMINATED once the backend ended a standard instance; "" once it is
// deleted (a spot instance the backend ended is: DELETE on preemption).
func (e *Emulator) statusLocked(in *instance) string {
	ended := !e.o.Backend.Ended(in.machine).IsZero()
	switch {
	case in.deleted || ended && in.spot:
		return ""
	case ended:
		return "TERMINATED"
	case cloudemu.SSHAnswers(in.addr):
		return "RUNNING"
	}
	return "PROVISIONING"
}

// resource is in as the API describes it now (e.mu held).
func (e *Emulator) resourceLocked(in *instance, status string) map[string]any {
	out := maps.Clone(in.json)
	out["status"] = status
	nic := map[string]any{"name": "nic0", "network": "https://compute.googleapis.com/compute/v1/projects/" + e.o.Project + "/global/networks/default"}
	if status != "TERMINATED" {
		nic["networkIP"] = in.addr
	}
	out["networkInterfaces"] = []any{nic}
	return out
}

func (e *Emulator) get(w http.ResponseWriter, zone, name string) {
	e.mu.Lock()
	in := e.insts[zone+"/"+name]
	var resp map[string]any
	if in != nil {
		if st := e.statusLocked(in); st != "" {
			resp = e.resourceLocked(in, st)
		}
	}
	e.mu.Unlock()
	if resp == nil {
		writeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' was not found", e.o.Project, zone, name))
		return
	}
	writeJSON(w, resp)
}

// filterRE is one term of a list filter: field, operator, value.
var filterRE = regexp.MustCompile(`\(?\s*([a-zA-Z0-9_.-]+)\s*(=|!=)\s*"?([^"()\s]*)"?\s*\)?`)

// filterTerm is one term of a list filter.
type filterTerm struct{ field, op, value string }

// parseFilter reads the filters the emulation answers: terms on
// labels.KEY and status, with = or !=, in parentheses side by side or
// joined by AND.
func parseFilter(f string) ([]filterTerm, error) {
	var out []filterTerm
	for _, m := range filterRE.FindAllStringSubmatch(f, -1) {
		if m[1] != "status" && !strings.HasPrefix(m[1], "labels.") {
			return nil, fmt.Errorf("invalid list filter %q: this emulation answers labels.KEY and status terms", f)
		}
		out = append(out, filterTerm{m[1], m[2], m[3]})
	}
	if rest := strings.TrimSpace(strings.ReplaceAll(filterRE.ReplaceAllString(f, ""), "AND", "")); rest != "" {
		return nil, fmt.Errorf("invalid list filter %q: %q is not understood by this emulation", f, rest)
	}
	return out, nil
}

func (t filterTerm) matches(labels map[string]string, status string) bool {
	have := status
	if k, ok := strings.CutPrefix(t.field, "labels."); ok {
		have = labels[k]
	}
	return (have == t.value) == (t.op == "=")
}

func (e *Emulator) list(w http.ResponseWriter, r *http.Request, zone string) {
	terms, err := parseFilter(r.URL.Query().Get("filter"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	e.mu.Lock()
	var items []any
	for _, in := range e.sortedLocked() {
		st := e.statusLocked(in)
		if in.zone != zone || st == "" {
			continue
		}
		labels := map[string]string{}
		if l, ok := in.json["labels"].(map[string]any); ok {
			for k, v := range l {
				labels[k], _ = v.(string)
			}
		}
		if !slices.ContainsFunc(terms, func(t filterTerm) bool { return !t.matches(labels, st) }) {
			items = append(items, e.resourceLocked(in, st))
		}
	}
	e.mu.Unlock()
	writeJSON(w, map[string]any{"kind": "compute#instanceList", "id": "projects/" + e.o.Project + "/zones/" + zone + "/instances", "items": items,
		"selfLink": e.zoneURL(zone) + "/instances"})
}

func (e *Emulator) sortedLocked() []*instance {
	out := slices.Collect(maps.Values(e.insts))
	slices.SortFunc(out, func(a, b *instance) int { return a.created.Compare(b.created) })
	return out
}

func (e *Emulator) delete(w http.ResponseWriter, r *http.Request, zone, name string) {
	e.mu.Lock()
	in := e.insts[zone+"/"+name]
	gone := in == nil || e.statusLocked(in) == ""
	e.mu.Unlock()
	if gone {
		writeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' was not found", e.o.Project, zone, name))
		return
	}
	if err := e.o.Backend.Terminate(r.Context(), []string{in.machine}); err != nil {
		writeError(w, http.StatusInternalServerError, "backendError", err.Error())
		return
	}
	e.mu.Lock()
	in.deleted = true
	op := *e.newOperationLocked(zone, "delete", e.zoneURL(zone)+"/instances/"+name, nil)
	e.mu.Unlock()
	writeJSON(w, op)
}

// regionOf is a zone's region ("us-central1-a": "us-central1").
func regionOf(zone string) string {
	if i := strings.LastIndexByte(zone, '-'); i > 0 {
		return zone[:i]
	}
	return zone
}
