package goplugin

import (
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestHCLogBridge(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	h := newHCLogger(zap.New(core)).Named("plugin").With("path", "/x")
	h.Trace("t")
	h.Info("i", "k", 1)
	h.Warn("w")
	h.Error("e", "odd")
	_, _ = h.StandardWriter(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}).Write([]byte("std\n"))

	want := []struct {
		msg   string
		level zapcore.Level
	}{{"t", zapcore.DebugLevel}, {"i", zapcore.InfoLevel}, {"w", zapcore.WarnLevel}, {"e", zapcore.ErrorLevel}, {"std", zapcore.WarnLevel}}
	got := logs.All()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i, w := range want {
		e := got[i]
		if e.Message != w.msg || e.Level != w.level || e.LoggerName != "plugin" || e.ContextMap()["path"] != "/x" {
			t.Errorf("entry %d = %s %q logger %q fields %v, want %s %q", i, e.Level, e.Message, e.LoggerName, e.ContextMap(), w.level, w.msg)
		}
	}
	if got[1].ContextMap()["k"] != int64(1) {
		t.Errorf("field k = %#v, want 1", got[1].ContextMap()["k"])
	}
	if h.Name() != "plugin" || !h.IsDebug() || h.GetLevel() != hclog.Debug {
		t.Errorf("Name %q IsDebug %v GetLevel %v", h.Name(), h.IsDebug(), h.GetLevel())
	}
}
