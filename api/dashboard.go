package api

import (
	"context"
	"time"
)

// VerbDashboard asks the daemon for a one-time login link to its web
// dashboard, bound to the caller (scavctl dashboard).
const VerbDashboard = "dashboard"

// DashboardLink is a one-time login link to a daemon's web dashboard: it
// logs in the user who asked for it, once, until Expires.
type DashboardLink struct {
	URL     string    `json:"url"`
	Expires time.Time `json:"expires"`
}

// Dashboard asks the daemon for a one-time login link to its dashboard.
func (c *Client) Dashboard(ctx context.Context) (DashboardLink, error) {
	var l DashboardLink
	return l, c.call(ctx, VerbDashboard, struct{}{}, &l)
}
