package grpcupgrade_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coldstart-go/coldstart/internal/printable"
	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/grpcupgrade"
)

// FuzzFromError: whatever status a server (ours, a newer one, a proxy, a
// hostile one) sends, FromError never panics; a status without our
// ErrorInfo comes back unchanged; a refusal is exactly one of in progress
// (a RetryAfter in [0, an hour]) or failed (a cause on one line, at most
// 1 KiB), and still answers status.Code with the code it came as.
func FuzzFromError(f *testing.F) {
	f.Add(uint32(codes.Unavailable), "upgrade in progress (running upgrade steps); call not executed", grpcupgrade.Domain, grpcupgrade.ReasonInProgress, "running-steps", "", true, int64(1), int32(500_000_000))
	f.Add(uint32(codes.Unavailable), "x", grpcupgrade.Domain, grpcupgrade.ReasonInProgress, "defragmenting", "", true, int64(4294967295), int32(0))
	f.Add(uint32(codes.Unavailable), "x", grpcupgrade.Domain, grpcupgrade.ReasonInProgress, "", "", true, int64(-5), int32(0))
	f.Add(uint32(codes.Unavailable), "x", grpcupgrade.Domain, grpcupgrade.ReasonInProgress, "checking", "", true, int64(1), int32(-1))
	f.Add(uint32(codes.FailedPrecondition), "upgrade failed: disk full; call not executed", grpcupgrade.Domain, grpcupgrade.ReasonFailed, "failed", "disk full", false, int64(0), int32(0))
	f.Add(uint32(codes.FailedPrecondition), "upgrade failed", grpcupgrade.Domain, grpcupgrade.ReasonFailed, "failed", "x\n[+]forged ok\r\n", false, int64(0), int32(0))
	f.Add(uint32(codes.FailedPrecondition), "", grpcupgrade.Domain, grpcupgrade.ReasonFailed, "", "  \t ", false, int64(0), int32(0))
	f.Add(uint32(codes.Unavailable), "no healthy upstream", "", "", "", "", false, int64(0), int32(0))
	f.Add(uint32(codes.Unavailable), "x", "example.com", grpcupgrade.ReasonInProgress, "checking", "", true, int64(1), int32(0))
	f.Add(uint32(codes.OK), "", grpcupgrade.Domain, grpcupgrade.ReasonFailed, "failed", "x", false, int64(0), int32(0))
	f.Add(uint32(99), "\xff", grpcupgrade.Domain, "\x00", "\xff", "\xff\xfe", true, int64(315576000000), int32(999_999_999))
	f.Fuzz(func(t *testing.T, code uint32, msg, domain, reason, phase, cause string, retry bool, secs int64, nanos int32) {
		st := status.New(codes.Code(code), msg)
		if domain != "" || reason != "" {
			md := map[string]string{grpcupgrade.MetadataPhase: phase}
			if cause != "" {
				md[grpcupgrade.MetadataCause] = cause
			}
			if s, err := st.WithDetails(&errdetails.ErrorInfo{Domain: domain, Reason: reason, Metadata: md}); err == nil {
				st = s
			}
		}
		if retry {
			if s, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: secs, Nanos: nanos}}); err == nil {
				st = s
			}
		}
		in := st.Err()
		err := grpcupgrade.FromError(in)

		inProgress, failed := errors.Is(err, upgrade.ErrUpgradeInProgress), errors.Is(err, upgrade.ErrUpgradeFailed)
		if !inProgress && !failed {
			if err != in {
				t.Fatalf("not a refusal, yet changed: %v into %v", in, err)
			}
			return
		}
		if inProgress == failed {
			t.Fatalf("%v matches in-progress %v, failed %v", err, inProgress, failed)
		}
		if got := status.Code(err); got != codes.Code(code) {
			t.Fatalf("a refusal of code %v answers status.Code %v", codes.Code(code), got)
		}
		var ip *upgrade.InProgressError
		if errors.As(err, &ip) {
			if d := ip.RetryAfter(); d < 0 || d > time.Hour {
				t.Fatalf("RetryAfter %v: not in [0, an hour]", d)
			}
		}
		var fe *upgrade.FailedError
		if errors.As(err, &fe) {
			text := fe.Err.Error()
			if len(text) > printable.MaxText || printable.Text(text) != text {
				t.Fatalf("the cause read is not one printable line of at most 1 KiB: %.80q (%d bytes)", text, len(text))
			}
		}
	})
}
