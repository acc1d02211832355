package localcloud

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// The metadata service answers the paths of AWS's IMDSv2 that cloudvm and
// a training job may read, for the instance whose address the request
// comes from. As IMDSv2 requires, every GET needs a session token from PUT
// /latest/api/token.
const (
	tokenPath    = "/latest/api/token"
	metadataPath = "/latest/meta-data/"
	ttlHeader    = "X-aws-ec2-metadata-token-ttl-seconds"
	tokenHeader  = "X-aws-ec2-metadata-token"
	maxTokens    = 4096
)

// tokens are the session tokens handed out, with their expiry.
type tokens struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (t *tokens) issue(ttl time.Duration) string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) >= maxTokens {
		for k, exp := range t.m {
			if now.After(exp) {
				delete(t.m, k)
			}
		}
	}
	if len(t.m) < maxTokens {
		t.m[tok] = now.Add(ttl)
	}
	return tok
}

func (t *tokens) valid(tok string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	exp, ok := t.m[tok]
	return ok && time.Now().Before(exp)
}

func (c *Cloud) imdsHandler() http.Handler {
	toks := &tokens{m: map[string]time.Time{}}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT "+tokenPath, func(w http.ResponseWriter, r *http.Request) {
		ttl, err := strconv.Atoi(r.Header.Get(ttlHeader))
		if err != nil || ttl < 1 || ttl > 21600 {
			http.Error(w, "bad "+ttlHeader, http.StatusBadRequest)
			return
		}
		w.Header().Set(ttlHeader, strconv.Itoa(ttl))
		_, _ = w.Write([]byte(toks.issue(time.Duration(ttl) * time.Second)))
	})
	mux.HandleFunc("GET "+metadataPath+"{path...}", func(w http.ResponseWriter, r *http.Request) {
		if !toks.valid(r.Header.Get(tokenHeader)) {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		answer(w, r, c.metadata)
	})
	// GCE's metadata server: the header is required both ways.
	mux.HandleFunc("GET "+gcePath+"{path...}", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Metadata-Flavor") != "Google" {
			http.Error(w, "Missing Metadata-Flavor:Google header.", http.StatusForbidden)
			return
		}
		w.Header().Set("Metadata-Flavor", "Google")
		answer(w, r, c.gceMetadata)
	})
	return mux
}

// answer answers r's path for the instance that asks (by its address) with
// lookup; 404 for a path it does not know.
func answer(w http.ResponseWriter, r *http.Request, lookup func(addr, path string) (string, bool)) {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	body, ok := lookup(host, strings.TrimSuffix(r.PathValue("path"), "/"))
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write([]byte(body))
}

// gcePath is the root of GCE's metadata paths.
const gcePath = "/computeMetadata/v1/"

// gceMetadata answers GCE's path for the live instance at addr:
// instance/preempted is TRUE once a spot instance is interrupted, and its
// instance/maintenance-event NONE throughout (a preemption is not host
// maintenance).
func (c *Cloud) gceMetadata(addr, path string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := c.liveAt(addr)
	if in == nil {
		return "", false
	}
	i := in.Instance
	switch path {
	case "instance/id", "instance/name", "instance/hostname":
		return i.ID, true
	case "instance/zone":
		return "projects/local/zones/" + i.Zone, true
	case "instance/machine-type":
		return "projects/local/machineTypes/" + i.Type, true
	case "instance/network-interfaces/0/ip":
		return i.Addr, true
	case "instance/scheduling/provisioning-model":
		if i.Market == provider.Spot {
			return "SPOT", true
		}
		return "STANDARD", true
	case "instance/maintenance-event":
		return "NONE", true
	case "instance/preempted":
		if in.Interrupt != nil && i.Market == provider.Spot {
			return "TRUE", true
		}
		return "FALSE", true
	}
	return "", false
}

// liveAt is the live instance at addr (c.mu held).
func (c *Cloud) liveAt(addr string) *instance {
	for _, x := range c.insts {
		if x.Instance.Addr == addr && x.Instance.Alive() {
			return x
		}
	}
	return nil
}

// metadata answers path for the live instance at addr.
func (c *Cloud) metadata(addr, path string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := c.liveAt(addr)
	if in == nil {
		return "", false
	}
	i := in.Instance
	switch path {
	case "":
		return "instance-id\ninstance-life-cycle\ninstance-type\nlocal-ipv4\nplacement/\nspot/\nevents/", true
	case "instance-id":
		return i.ID, true
	case "instance-type":
		return i.Type, true
	case "local-ipv4":
		return i.Addr, true
	case "placement/availability-zone":
		return i.Zone, true
	case "instance-life-cycle":
		if i.Market == provider.Spot {
			return "spot", true
		}
		return "on-demand", true
	}
	if in.Interrupt == nil || i.Market != provider.Spot {
		return "", false
	}
	at := in.Interrupt.UTC().Format(time.RFC3339)
	switch path {
	case "spot/instance-action":
		b, _ := json.Marshal(map[string]string{"action": "terminate", "time": at})
		return string(b), true
	case "spot/termination-time":
		return at, true
	case "events/recommendations/rebalance":
		b, _ := json.Marshal(map[string]string{"noticeTime": in.Notice.UTC().Format(time.RFC3339)})
		return string(b), true
	}
	return "", false
}
