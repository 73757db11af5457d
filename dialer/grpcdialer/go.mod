module github.com/coldstart-go/coldstart/dialer/grpcdialer

go 1.26.0

require (
	github.com/coldstart-go/coldstart v0.0.0
	github.com/juju/errors v1.0.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/juju/clock v1.1.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	golang.org/x/time v0.15.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)

// Development replace: build against the root module in this repository.
replace github.com/coldstart-go/coldstart => ../..
