module github.com/coldstart-go/coldstart/upgrade/internal/clienttest

go 1.25.0

require (
	github.com/coldstart-go/coldstart v0.0.0
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/juju/clock v1.1.1 // indirect
	github.com/juju/errors v1.0.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

// Development replace: build against the root module in this repository.
replace github.com/coldstart-go/coldstart => ../../..
