// Package goplugin carries the launcher contract of package plugins over
// hashicorp/go-plugin and gRPC, for launchers built as separate binaries:
// Serve is what a plugin binary's main calls, Load what the host calls to
// start one (after checking its sha256), and the client and server between
// them turn every Launcher and Handle call into the messages of
// plugins/proto, with the contract's errors mapped to gRPC codes and back.
// The plugin's log lines reach the host's zap logger through go-plugin.
package goplugin
