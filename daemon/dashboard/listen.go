package dashboard

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/netaddr"
)

// maxConns bounds the link listener's connections, logged in or not (each
// user's streams are bounded too: maxStreamsPerUser).
const maxConns = 256

// Link is a one-time login link for who: the link listener's address (the
// listener opens at the first link) with a secret that logs who in once,
// within LinkTTL.
func (s *Server) Link(ctx context.Context, who api.Owner) (api.DashboardLink, error) {
	base, err := s.linkListener()
	if err != nil {
		return api.DashboardLink{}, err
	}
	tok, exp, err := s.auth.newLink(who)
	if err != nil {
		return api.DashboardLink{}, err
	}
	s.log.Info("dashboard login link", zap.String("user", who.User), zap.Time("expires", exp))
	return api.DashboardLink{URL: base + "/ui/login?t=" + url.QueryEscape(tok), Expires: exp}, nil
}

// CheckListen says why the link listener may not listen on addr: off
// loopback it needs TLS (certificate and key).
func CheckListen(addr, cert, key string) error {
	if addr == "" || cert != "" && key != "" || netaddr.Loopback(addr) {
		return nil
	}
	return fmt.Errorf("dashboard listen %s: off loopback the dashboard needs TLS: set api_tls_cert and api_tls_key", addr)
}

// linkListener opens the link listener unless it is open, and returns its
// base URL.
func (s *Server) linkListener() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.linkURL != "" {
		return s.linkURL, nil
	}
	o := s.o
	if o.Listen == "" {
		return "", fmt.Errorf("%w: this scavd serves no dashboard links (dashboard_listen is empty)", api.ErrBadRequest)
	}
	if err := CheckListen(o.Listen, o.TLSCert, o.TLSKey); err != nil {
		return "", err
	}
	if s.base.Err() != nil {
		return "", errors.New("dashboard: the daemon is stopping")
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return "", fmt.Errorf("dashboard listen %s: %w", o.Listen, err)
	}
	ln = netutil.LimitListener(ln, maxConns)
	scheme := "http"
	if o.TLSCert != "" && o.TLSKey != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			ln.Close()
			return "", fmt.Errorf("dashboard listen %s: load TLS certificate: %w", o.Listen, err)
		}
		ln, scheme = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), "https"
	}
	addr := ln.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	hostPort := net.JoinHostPort(host, fmt.Sprint(addr.Port))
	var hosts map[string]bool // off loopback (TLS): the certificate's names, which this cannot list
	if scheme == "http" {
		hosts = map[string]bool{}
		for _, h := range []string{host, "127.0.0.1", "localhost", "::1"} {
			hosts[net.JoinHostPort(h, fmt.Sprint(addr.Port))] = true
		}
	}
	srv := &http.Server{Handler: s.handler(nil, scheme == "https", hosts), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, BaseContext: func(net.Listener) context.Context { return s.base }, ErrorLog: zap.NewStdLog(s.log)}
	s.linkSrv, s.linkURL = srv, scheme+"://"+hostPort
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("serve the dashboard", zap.String("addr", hostPort), zap.Error(err))
		}
	}()
	s.log.Info("dashboard listening", zap.String("url", s.linkURL+"/ui/"))
	return s.linkURL, nil
}

// Addr is the link listener's base URL ("" until the first link).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.linkURL
}
