// Package netaddr answers questions about listen addresses that several
// servers of scavd ask alike.
package netaddr

import "net"

// Loopback reports whether addr ("host:port") listens on loopback only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
