module github.com/coldstart-go/coldstart/examples

go 1.26.0

// Development replaces: build against the modules in this repository.
replace (
	github.com/coldstart-go/coldstart => ../
	github.com/coldstart-go/coldstart/dialer/grpcdialer => ../dialer/grpcdialer
	github.com/coldstart-go/coldstart/metrics => ../metrics
	github.com/coldstart-go/coldstart/upgrade/grpcupgrade => ../upgrade/grpcupgrade
)

require (
	github.com/coldstart-go/coldstart v0.0.0
	github.com/coldstart-go/coldstart/dialer/grpcdialer v0.0.0
	github.com/coldstart-go/coldstart/metrics v0.0.0
	github.com/coldstart-go/coldstart/upgrade/grpcupgrade v0.0.0
	github.com/juju/clock v1.1.1
	github.com/prometheus/client_golang v1.25.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	golang.org/x/time v0.15.0
	google.golang.org/grpc v1.85.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/juju/errors v1.0.0 // indirect
	github.com/juju/loggo v0.0.0-20210728185423-eebad3a902c4 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
