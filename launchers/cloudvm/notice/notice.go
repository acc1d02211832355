// Package notice watches one instance for spot interruption notices: it
// polls the instance metadata service (AWS IMDSv2, with the AWS SDK's own
// imds client and its session tokens) for spot/instance-action, the
// two-minute termination notice, and events/recommendations/rebalance, the
// earlier warning, the way AWS advises (every few seconds). On GCE
// (Options.Flavor) it polls the metadata server's instance/preempted
// (TRUE once the spot VM is being preempted: 30 s before it stops) and
// instance/maintenance-event (TERMINATE_ON_HOST_MAINTENANCE ends a spot
// VM; MIGRATE_ON_HOST_MAINTENANCE is the rebalance-like warning), with the
// Metadata-Flavor: Google header. The local provider's metadata service
// answers both flavors' paths.
//
// The metadata service is reachable only from the instance itself, so
// cloudvm hands the watcher a dialer that opens connections from the
// instance: a direct-tcpip channel of the instance's SSH connection. Tests
// use a plain dialer against a local service, and, as a conformance check,
// against AWS's amazon-ec2-metadata-mock.
package notice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Kinds of notice.
const (
	// KindInterruption is a spot instance-action: the instance is stopped
	// or terminated at Notice.Time.
	KindInterruption = "interruption"
	// KindRebalance is a rebalance recommendation: the instance is at
	// elevated risk of interruption.
	KindRebalance = "rebalance"
)

// Notice is one notice read from the metadata service.
type Notice struct {
	Kind string `json:"kind"`
	// Action is the instance-action's action (terminate, stop, hibernate).
	Action string `json:"action,omitempty"`
	// Time is when the action happens (interruption) or when the
	// recommendation was made (rebalance).
	Time time.Time `json:"time"`
}

// Dialer opens a connection as the instance would.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// Options configure a Watcher.
type Options struct {
	// Endpoint is the metadata service's base URL (http://169.254.169.254).
	Endpoint string
	// Dial opens the connections (default: a net.Dialer, from this host).
	Dial Dialer
	// Interval is the time between polls (default 5 s, as AWS advises).
	Interval time.Duration
	// Rebalance also reports rebalance recommendations, not only
	// interruptions.
	Rebalance bool
	// Flavor is the metadata service's: FlavorAWS (the default) or FlavorGCE.
	Flavor string
}

// Flavors of metadata service.
const (
	FlavorAWS = "aws"
	FlavorGCE = "gce"
)

// GCEPreemptNotice is how long a GCE spot VM runs on once it is told it is
// preempted (ACPI soft-off, then a hard stop).
const GCEPreemptNotice = 30 * time.Second

// DefaultInterval is the polling interval unless Options names one.
const DefaultInterval = 5 * time.Second

// Watcher polls one instance's metadata service.
type Watcher struct {
	o      Options
	hc     *http.Client
	client *imds.Client
}

// New makes a watcher.
func New(o Options) *Watcher {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Dial == nil {
		var d net.Dialer
		o.Dial = d.DialContext
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: o.Dial, MaxIdleConns: 1}}
	c := imds.New(imds.Options{
		Endpoint: o.Endpoint, HTTPClient: hc,
		// AWS_EC2_METADATA_DISABLED is for the SDK's credential chain; the
		// watcher reads an instance's notices whatever it says.
		ClientEnableState: imds.ClientEnabled,
		// IMDSv2 only: a token failure is an error, never a silent v1 fallback.
		EnableFallback: aws.FalseTernary,
		Retryer:        aws.NopRetryer{}, // the watcher polls again anyway
	})
	return &Watcher{o: o, hc: hc, client: c}
}

// Close releases the watcher's idle connections.
func (w *Watcher) Close() { w.hc.CloseIdleConnections() }

// Wait polls until a notice appears and returns it, or until ctx is done.
// Failed polls (the instance briefly unreachable) are retried; errs, when
// not nil, hears of each.
func (w *Watcher) Wait(ctx context.Context, errs func(error)) (Notice, error) {
	t := time.NewTicker(w.o.Interval)
	defer t.Stop()
	for {
		n, ok, err := w.Poll(ctx)
		if ok {
			return n, nil
		}
		if err != nil && errs != nil && ctx.Err() == nil {
			errs(err)
		}
		select {
		case <-ctx.Done():
			return Notice{}, ctx.Err()
		case <-t.C:
		}
	}
}

// Poll reads the notices once: the interruption first, then (with
// Options.Rebalance) the recommendation.
func (w *Watcher) Poll(ctx context.Context) (Notice, bool, error) {
	if w.o.Flavor == FlavorGCE {
		return w.pollGCE(ctx)
	}
	body, ok, err := w.get(ctx, "spot/instance-action")
	if err != nil {
		return Notice{}, false, err
	}
	if ok {
		var a struct {
			Action string    `json:"action"`
			Time   time.Time `json:"time"`
		}
		if err := json.Unmarshal(body, &a); err != nil {
			return Notice{}, false, fmt.Errorf("decode spot/instance-action %q: %w", body, err)
		}
		return Notice{Kind: KindInterruption, Action: a.Action, Time: a.Time}, true, nil
	}
	if !w.o.Rebalance {
		return Notice{}, false, nil
	}
	body, ok, err = w.get(ctx, "events/recommendations/rebalance")
	if err != nil || !ok {
		return Notice{}, false, err
	}
	var r struct {
		NoticeTime time.Time `json:"noticeTime"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return Notice{}, false, fmt.Errorf("decode events/recommendations/rebalance %q: %w", body, err)
	}
	return Notice{Kind: KindRebalance, Time: r.NoticeTime}, true, nil
}

// get reads one metadata path; ok is false when it is not there (404).
func (w *Watcher) get(ctx context.Context, path string) ([]byte, bool, error) {
	out, err := w.client.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read metadata %s: %w", path, err)
	}
	defer out.Content.Close()
	b, err := io.ReadAll(out.Content)
	if err != nil {
		return nil, false, fmt.Errorf("read metadata %s: %w", path, err)
	}
	return b, true, nil
}

// pollGCE reads GCE's preempted and maintenance-event once.
func (w *Watcher) pollGCE(ctx context.Context) (Notice, bool, error) {
	pre, err := w.getGCE(ctx, "instance/preempted")
	if err != nil {
		return Notice{}, false, err
	}
	now := time.Now().UTC()
	if strings.EqualFold(pre, "TRUE") {
		return Notice{Kind: KindInterruption, Action: "terminate", Time: now.Add(GCEPreemptNotice)}, true, nil
	}
	ev, err := w.getGCE(ctx, "instance/maintenance-event")
	switch {
	case err != nil:
		return Notice{}, false, err
	case ev == "TERMINATE_ON_HOST_MAINTENANCE":
		return Notice{Kind: KindInterruption, Action: "terminate", Time: now.Add(time.Minute)}, true, nil // GCE: about 60 s ahead
	case ev != "" && ev != "NONE" && w.o.Rebalance:
		return Notice{Kind: KindRebalance, Action: strings.ToLower(ev), Time: now}, true, nil
	}
	return Notice{}, false, nil
}

// getGCE reads one path of the GCE metadata server.
func (w *Watcher) getGCE(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(w.o.Endpoint, "/")+"/computeMetadata/v1/"+path, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err := w.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("read metadata %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("read metadata %s: %s %q %v", path, resp.Status, b, err)
	}
	return strings.TrimSpace(string(b)), nil
}
