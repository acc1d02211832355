package goplugin

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStatusRoundTrip(t *testing.T) {
	for _, e := range errorCodes {
		in := fmt.Errorf("start job j attempt 1: %w", e.err)
		st := toStatus(in)
		if got := status.Code(st); got != e.code {
			t.Errorf("toStatus(%v) code = %v, want %v", in, got, e.code)
		}
		out := fromStatus(st)
		if !errors.Is(out, e.err) {
			t.Errorf("fromStatus(toStatus(%v)) = %v, does not wrap the sentinel", in, out)
		}
		if out.Error() != in.Error() {
			t.Errorf("message %q became %q", in, out)
		}
	}
}

func TestStatusOther(t *testing.T) {
	if toStatus(nil) != nil || fromStatus(nil) != nil {
		t.Fatalf("nil errors must stay nil")
	}
	st := toStatus(errors.New("disk on fire"))
	if status.Code(st) != codes.Unknown {
		t.Errorf("plain error code = %v, want Unknown", status.Code(st))
	}
	out := fromStatus(st)
	if out.Error() != "disk on fire" {
		t.Errorf("plain error message = %q", out)
	}
	for _, e := range errorCodes {
		if errors.Is(out, e.err) {
			t.Errorf("plain error wraps %v", e.err)
		}
	}
	// A status passes through toStatus unchanged; a non-status through fromStatus.
	already := status.Error(codes.NotFound, "x")
	if toStatus(already) != already {
		t.Errorf("toStatus changed a status error")
	}
	if !errors.Is(fromStatus(context.Canceled), context.Canceled) {
		t.Errorf("fromStatus changed a non-status error")
	}
}
