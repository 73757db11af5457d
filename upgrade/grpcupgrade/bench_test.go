package grpcupgrade_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/grpcupgrade"
)

var okResponse = &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}

func bareUnary(context.Context, any) (any, error) { return okResponse, nil }

// BenchmarkUnaryServerInterceptorOverhead measures an allowed unary call
// through the interceptor beside the bare handler, interleaved in blocks so
// that drift hits both alike, and reports the difference (goal: ≤ 100 ns).
func BenchmarkUnaryServerInterceptorOverhead(b *testing.B) {
	cases := map[string]func(*upgrade.Gate) grpc.UnaryServerInterceptor{
		"complete": func(g *upgrade.Gate) grpc.UnaryServerInterceptor {
			g.Complete()
			return grpcupgrade.UnaryServerInterceptor(g, nil)
		},
		"allowlisted-during-upgrade": func(g *upgrade.Gate) grpc.UnaryServerInterceptor {
			_ = g.Enter(upgrade.PhaseRunningSteps)
			return grpcupgrade.UnaryServerInterceptor(g, grpcupgrade.AllowMethods(healthpb.Health_Check_FullMethodName))
		},
	}
	for name, build := range cases {
		b.Run(name, func(b *testing.B) {
			intercept := build(upgrade.NewGate(upgrade.GateConfig{}))
			ctx, req := context.Background(), &healthpb.HealthCheckRequest{}
			info := &grpc.UnaryServerInfo{FullMethod: healthpb.Health_Check_FullMethodName}
			b.ReportAllocs()
			b.ResetTimer()
			const block = 1024
			var bare, wrapped time.Duration
			for done := 0; done < b.N; done += block {
				n := min(block, b.N-done)
				start := time.Now()
				for range n {
					_, _ = bareUnary(ctx, req)
				}
				mid := time.Now()
				for range n {
					_, _ = intercept(ctx, req, info, bareUnary)
				}
				bare, wrapped = bare+mid.Sub(start), wrapped+time.Since(mid)
			}
			b.ReportMetric(float64(bare.Nanoseconds())/float64(b.N), "bare-ns/op")
			b.ReportMetric(float64(wrapped.Nanoseconds())/float64(b.N), "wrapped-ns/op")
			b.ReportMetric(float64((wrapped-bare).Nanoseconds())/float64(b.N), "overhead-ns/op")
		})
	}
}

// BenchmarkRefusal is the cost of refusing a unary call (building the
// status with its ErrorInfo and RetryInfo, and the pushback), in progress
// and failed.
func BenchmarkRefusal(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: "/pkg.Service/Deploy"}
	for name, setup := range map[string]func(*upgrade.Gate){
		"in-progress": func(g *upgrade.Gate) { _ = g.Enter(upgrade.PhaseRunningSteps) },
		"failed":      func(g *upgrade.Gate) { g.Fail(context.DeadlineExceeded) },
	} {
		b.Run(name, func(b *testing.B) {
			g := upgrade.NewGate(upgrade.GateConfig{})
			setup(g)
			intercept := grpcupgrade.UnaryServerInterceptor(g, nil)
			// A server call's context carries its stream, where the trailer goes.
			ctx := grpc.NewContextWithServerTransportStream(context.Background(), nopStream{})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := intercept(ctx, nil, info, bareUnary); err == nil {
					b.Fatal("not refused")
				}
			}
		})
	}
}

// BenchmarkCheckOverLoopback is a whole unary call over a real connection,
// with and without the server interceptor (the gate complete): the
// interceptor's share of a real call.
func BenchmarkCheckOverLoopback(b *testing.B) {
	g := upgrade.NewGate(upgrade.GateConfig{})
	g.Complete()
	clients := map[string]healthpb.HealthClient{"bare": benchClient(b, g, false), "interceptor": benchClient(b, g, true)}
	ctx, req := context.Background(), &healthpb.HealthCheckRequest{}
	// Alternate the two in rounds so that load from other processes hits
	// both alike.
	for round := range 3 {
		for _, name := range []string{"bare", "interceptor"} {
			b.Run(fmt.Sprintf("%s/round-%d", name, round), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := clients[name].Check(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// nopStream is the server stream a call's context carries, minus the wire.
type nopStream struct{}

func (nopStream) Method() string                  { return "/pkg.Service/Deploy" }
func (nopStream) SetHeader(metadata.MD) error     { return nil }
func (nopStream) SendHeader(metadata.MD) error    { return nil }
func (nopStream) SetTrailer(md metadata.MD) error { return nil }
