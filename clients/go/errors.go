package memory

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every call returns the server's gRPC status as its error (or a context
// error), so status.Code, status.FromError and the helpers below work on it.

// ErrResyncRequired is what Watch yields when its resume token is older than
// the history the server keeps (OUT_OF_RANGE): events were missed, so re-read
// the threads with Get and watch again without a resume token. The error
// yielded wraps both this and the server's status.
var ErrResyncRequired = errors.New("memory: watch resume token is older than the retained history; re-read with Get and watch from now")

func resyncRequired(err error) error {
	return fmt.Errorf("%w: %w", ErrResyncRequired, err)
}

// Code is the gRPC code of err: codes.OK for nil, codes.Unknown for an error
// that carries no status.
func Code(err error) codes.Code { return status.Code(err) }

// IsUnavailable: the server could not be reached (Add has already retried).
func IsUnavailable(err error) bool { return Code(err) == codes.Unavailable }

// IsInvalidArgument: the request was refused as malformed; the message names
// the field. Nothing was changed.
func IsInvalidArgument(err error) bool { return Code(err) == codes.InvalidArgument }

// IsStrategyConflict: Add named a strategy other than the thread's
// (FAILED_PRECONDITION); use ReplaceStrategy to change it.
func IsStrategyConflict(err error) bool { return Code(err) == codes.FailedPrecondition }

// IsSeqConflict: the thread's last seq was not ExpectedLastSeq (ABORTED);
// re-read and try again.
func IsSeqConflict(err error) bool { return Code(err) == codes.Aborted }

// IsResourceExhausted: a size, quota or rate limit was hit.
func IsResourceExhausted(err error) bool { return Code(err) == codes.ResourceExhausted }

// IsAlreadyExists: Fork's new thread id names a live thread (ALREADY_EXISTS);
// clear it or choose another. Nothing was created.
func IsAlreadyExists(err error) bool { return Code(err) == codes.AlreadyExists }
