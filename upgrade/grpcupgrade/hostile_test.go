package grpcupgrade_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/grpcupgrade"
)

// refusalWith is a refusal in progress as a server (ours, a newer one, a
// hostile one) might send it, with the RetryInfo delay d.
func refusalWith(t *testing.T, d *durationpb.Duration) error {
	t.Helper()
	st, err := status.New(codes.Unavailable, "upgrade in progress").WithDetails(
		&errdetails.ErrorInfo{Reason: grpcupgrade.ReasonInProgress, Domain: grpcupgrade.Domain},
		&errdetails.RetryInfo{RetryDelay: d})
	require.NoError(t, err)
	return st.Err()
}

// The incident: upgrade's HTTP client read a Retry-After of "forever"
// (4294967295 s) as an hour, but FromError took a RetryInfo delay as it
// came: a server that asked for 136 years parked every gRPC client that
// long. The two clients read a hint by one rule.
func TestFromErrorBoundsTheServersWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    *durationpb.Duration
		want time.Duration
	}{
		{"a wait of a second", durationpb.New(time.Second), time.Second},
		{"half an hour", durationpb.New(30 * time.Minute), 30 * time.Minute},
		{"an hour", durationpb.New(time.Hour), time.Hour},
		{"a proxy's forever", &durationpb.Duration{Seconds: 4294967295}, time.Hour},
		{"beyond a Duration", &durationpb.Duration{Seconds: 315576000000}, time.Hour},
		{"negative", durationpb.New(-time.Second), 0},
		{"not a duration", &durationpb.Duration{Seconds: 1, Nanos: -1}, 0},
	} {
		var ip *upgrade.InProgressError
		require.ErrorAs(t, grpcupgrade.FromError(refusalWith(t, tc.d)), &ip, tc.name)
		assert.Equal(t, tc.want, ip.RetryAfter(), tc.name)
	}
}

// The incident: a failed upgrade's cause went out whole — a megabyte of
// it in the ErrorInfo's metadata and again in the status message, in every
// refusal's trailers, and newlines and all into the client's error. It
// goes out as upgrade's HTTP refusal sends it: on one line, cut at 1 KiB;
// and a client reads another server's cause the same way.
func TestAFailedUpgradesCauseIsSentBounded(t *testing.T) {
	const forged = "\n[+]forged ok\r\n"
	g := upgrade.NewGate(upgrade.GateConfig{})
	g.Fail(errors.New("step 3" + forged + strings.Repeat("c", 1<<20)))
	_, refusal := grpcupgrade.UnaryServerInterceptor(g, nil)(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/a.B/C"}, nil)

	st := status.Convert(refusal)
	assert.Less(t, len(st.Message()), 2<<10, "the message: a megabyte sent whole")
	assert.False(t, strings.Contains(st.Message(), "\n"), "a line of its own: %.80q", st.Message())
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	require.NotNil(t, info)
	cause := info.GetMetadata()[grpcupgrade.MetadataCause]
	assert.LessOrEqual(t, len(cause), 1<<10, "the metadata's cause: a megabyte sent whole")
	assert.True(t, strings.HasPrefix(cause, "step 3␊[+]forged ok␍␊ccc"), "%.40q", cause)
	assert.True(t, strings.HasSuffix(cause, "…"), "cut, and says so")
	assert.True(t, "upgrade failed: "+cause+"; call not executed" == st.Message(), "the message wraps the same cause: %.80q", st.Message())

	err := grpcupgrade.FromError(refusal)
	assert.ErrorIs(t, err, upgrade.ErrUpgradeFailed)
	var fe *upgrade.FailedError
	require.ErrorAs(t, err, &fe)
	assert.True(t, cause == fe.Err.Error(), "the client reads the cause sent: %.80q", fe.Err.Error())

	// A server not ours sends a megabyte, with newlines: the client's
	// error holds 1 KiB of it, on one line.
	hostile, werr := status.New(codes.FailedPrecondition, "upgrade failed").WithDetails(&errdetails.ErrorInfo{
		Reason: grpcupgrade.ReasonFailed, Domain: grpcupgrade.Domain,
		Metadata: map[string]string{grpcupgrade.MetadataCause: "x" + forged + strings.Repeat("c", 1<<20)}})
	require.NoError(t, werr)
	require.ErrorAs(t, grpcupgrade.FromError(hostile.Err()), &fe)
	assert.LessOrEqual(t, len(fe.Err.Error()), 1<<10, "a megabyte read whole")
	assert.False(t, strings.Contains(fe.Err.Error(), "\n"), "a line of its own: %.80q", fe.Err.Error())
}
