package daemon

import (
	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/dashboard"
)

// newDashboard makes the web dashboard (daemon/dashboard), which reads and
// acts through the API as each of its viewers; the API serves it under /ui/
// on its TCP listener and hands out its login links.
func (d *Daemon) newDashboard() *dashboard.Server {
	cfg := d.cfg
	d.dash = dashboard.New(d.root, dashboard.Options{
		Log: d.log.Named("dashboard"), Node: cfg.Node,
		As:     func(who api.Owner) dashboard.Source { return d.api.As(who) },
		Self:   func() api.Owner { return d.api.Self() },
		Listen: cfg.DashboardListen, TLSCert: cfg.APITLSCert, TLSKey: cfg.APITLSKey,
	})
	return d.dash
}

// DashboardURL is the dashboard's loopback address ("" until a login link
// opened it).
func (d *Daemon) DashboardURL() string {
	if d.dash == nil {
		return ""
	}
	return d.dash.Addr()
}
