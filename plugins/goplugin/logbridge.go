package goplugin

import (
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// This file is the one place where go-plugin's logging meets zap: on the
// host, hclog calls (go-plugin's own and the log lines a plugin writes to
// its stderr) become zap entries; in a plugin, zap writes the JSON lines
// that go-plugin on the host parses back into levelled entries.

// hclogTimeFormat is the @timestamp layout that go-plugin parses.
const hclogTimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// NewPluginLogger returns the zap logger a plugin binary should log with:
// JSON lines on stderr with hclog's @level, @message, @timestamp and
// @module keys, which the host re-emits at their level through its own zap
// logger. level is the least level written.
func NewPluginLogger(level zapcore.Level) *zap.Logger {
	enc := zapcore.NewJSONEncoder(zapcore.EncoderConfig{
		MessageKey:     "@message",
		LevelKey:       "@level",
		TimeKey:        "@timestamp",
		NameKey:        "@module",
		EncodeLevel:    zapcore.LowercaseLevelEncoder,
		EncodeTime:     zapcore.TimeEncoderOfLayout(hclogTimeFormat),
		EncodeDuration: zapcore.StringDurationEncoder,
		EncodeName:     zapcore.FullNameEncoder,
	})
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(os.Stderr), level))
}

// newHCLogger returns an hclog.Logger that writes to z.
func newHCLogger(z *zap.Logger) hclog.Logger {
	return &hcZap{z: z.WithOptions(zap.AddCallerSkip(1))}
}

// hcZap adapts a zap logger to hclog.Logger. Its level is zap's.
type hcZap struct {
	z       *zap.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*hcZap)(nil)

func fields(args []any) []zap.Field {
	fs := make([]zap.Field, 0, (len(args)+1)/2)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			fs = append(fs, zap.Any("EXTRA_VALUE_AT_END", args[i]))
			break
		}
		fs = append(fs, zap.Any(fmt.Sprint(args[i]), args[i+1]))
	}
	return fs
}

func (h *hcZap) Log(level hclog.Level, msg string, args ...any) {
	fs := fields(args)
	switch {
	case level <= hclog.Debug: // Trace, Debug and NoLevel
		h.z.Debug(msg, fs...)
	case level == hclog.Info:
		h.z.Info(msg, fs...)
	case level == hclog.Warn:
		h.z.Warn(msg, fs...)
	default:
		h.z.Error(msg, fs...)
	}
}

func (h *hcZap) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hcZap) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hcZap) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hcZap) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hcZap) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hcZap) IsTrace() bool { return h.z.Core().Enabled(zapcore.DebugLevel) }
func (h *hcZap) IsDebug() bool { return h.z.Core().Enabled(zapcore.DebugLevel) }
func (h *hcZap) IsInfo() bool  { return h.z.Core().Enabled(zapcore.InfoLevel) }
func (h *hcZap) IsWarn() bool  { return h.z.Core().Enabled(zapcore.WarnLevel) }
func (h *hcZap) IsError() bool { return h.z.Core().Enabled(zapcore.ErrorLevel) }

func (h *hcZap) ImpliedArgs() []any { return h.implied }

func (h *hcZap) With(args ...any) hclog.Logger {
	return &hcZap{z: h.z.With(fields(args)...), name: h.name, implied: append(append([]any(nil), h.implied...), args...)}
}

func (h *hcZap) Name() string { return h.name }

func (h *hcZap) Named(name string) hclog.Logger {
	full := name
	if h.name != "" {
		full = h.name + "." + name
	}
	return &hcZap{z: h.z.Named(name), name: full, implied: h.implied}
}

// ResetNamed keeps zap's name: zap names can only be extended.
func (h *hcZap) ResetNamed(name string) hclog.Logger {
	return &hcZap{z: h.z, name: name, implied: h.implied}
}

// SetLevel does nothing: the level is the zap logger's.
func (h *hcZap) SetLevel(hclog.Level) {}

func (h *hcZap) GetLevel() hclog.Level {
	switch {
	case h.IsDebug():
		return hclog.Debug
	case h.IsInfo():
		return hclog.Info
	case h.IsWarn():
		return hclog.Warn
	default:
		return hclog.Error
	}
}

func (h *hcZap) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hcZap) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return &hcWriter{h: h, level: level}
}

// hcWriter logs each Write, without its trailing newline, at one level.
type hcWriter struct {
	h     *hcZap
	level hclog.Level
}

func (w *hcWriter) Write(p []byte) (int, error) {
	w.h.Log(w.level, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
