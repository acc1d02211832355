package goplugin

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scavenger-ml/scavenger/plugins"
)

// The one table between domain errors and gRPC status codes; toStatus is
// used by the server and fromStatus by the client. Anything else crosses
// as codes.Unknown with its message.
var errorCodes = []struct {
	err  error
	code codes.Code
}{
	{plugins.ErrInvalidSpec, codes.InvalidArgument},
	{plugins.ErrUnsupported, codes.Unimplemented},
	{plugins.ErrStopped, codes.Aborted},
	{plugins.ErrFinished, codes.FailedPrecondition},
	{plugins.ErrUnknownHandle, codes.NotFound},
	{plugins.ErrPluginUnavailable, codes.Unavailable},
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

// toStatus turns a launcher's error into a gRPC status error that keeps its
// message and, through its code, its sentinel.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			return status.Error(e.code, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

// remoteError is an error returned by a launcher plugin: the plugin's
// message, wrapping the sentinel its status code stands for.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

// fromStatus turns an error of a gRPC call into a domain error: the
// plugin's message, wrapping the contract sentinel of its status code
// (ErrInvalidSpec, ErrStopped, ErrFinished, ...), so that errors.Is works
// on both sides of the transport. Errors that are not statuses pass through.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, e := range errorCodes {
		if st.Code() == e.code {
			return &remoteError{msg: st.Message(), err: e.err}
		}
	}
	return errors.New(st.Message())
}
