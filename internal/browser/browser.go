// Package browser starts a headless Chromium (Debian's chromium package)
// for the dashboard's browser tests, its screenshots and its benchmark,
// driven with chromedp, with the flags a machine without outside network
// needs (no background networking, component updates, sync or QUIC: else
// Chromium keeps trying hosts it cannot reach) and a fresh profile.
package browser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/chromedp/chromedp"
)

// ErrNoChromium is a machine without Chromium.
var ErrNoChromium = errors.New("no chromium: install Debian's chromium package (make setup does), or set $SCAV_CHROMIUM")

// ExecPath is Chromium's binary: $SCAV_CHROMIUM, else chromium or
// chromium-browser on the PATH.
func ExecPath() (string, error) {
	if p := os.Getenv("SCAV_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoChromium
}

// Start starts Chromium, headless, with a window of width×height and a new
// profile directory, and returns the context to open tabs in
// (chromedp.NewContext); stop ends the browser and removes the profile.
func Start(ctx context.Context, width, height int) (_ context.Context, stop func(), err error) {
	path, err := ExecPath()
	if err != nil {
		return nil, nil, err
	}
	profile, err := os.MkdirTemp("", "scav-chromium-")
	if err != nil {
		return nil, nil, fmt.Errorf("chromium profile: %w", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(profile), chromedp.WindowSize(width, height),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true), chromedp.Flag("mute-audio", true),
		// Its singleton socket's directory goes in TMPDIR: in the profile,
		// it goes with it (in /tmp, one was left per browser started).
		chromedp.Env("TMPDIR=" + profile),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	// The first run starts the browser (and its first tab).
	if err := chromedp.Do(bctx); err != nil {
		cancelBrowser()
		cancelAlloc()
		os.RemoveAll(profile)
		return nil, nil, fmt.Errorf("start %s: %w", path, err)
	}
	return bctx, func() {
		cancelBrowser()
		cancelAlloc()
		os.RemoveAll(profile)
	}, nil
}

// Tab opens a tab of its own browser context (its own cookies) in the
// browser of bctx; close closes it.
func Tab(bctx context.Context, width, height int) (context.Context, func(), error) {
	ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(height))); err != nil {
		cancel()
		return nil, nil, fmt.Errorf("open a tab: %w", err)
	}
	return ctx, cancel, nil
}

// StartTab starts Chromium (Start) and opens one tab of width×height in
// it; stop closes both.
func StartTab(ctx context.Context, width, height int) (tab context.Context, stop func(), err error) {
	bctx, stopBrowser, err := Start(ctx, width, height)
	if err != nil {
		return nil, nil, err
	}
	tab, closeTab, err := Tab(bctx, width, height)
	if err != nil {
		stopBrowser()
		return nil, nil, err
	}
	return tab, func() {
		closeTab()
		stopBrowser()
	}, nil
}
