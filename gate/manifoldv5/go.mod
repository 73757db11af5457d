module github.com/coldstart-go/coldstart/gate/manifoldv5

go 1.25.0

require (
	github.com/coldstart-go/coldstart v0.0.0
	github.com/juju/clock v1.1.1
	github.com/juju/worker/v5 v5.0.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/juju/collections v0.0.0-20220203020748-febd7cad8a7a // indirect
	github.com/juju/errors v1.0.0 // indirect
	github.com/juju/loggo v1.0.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.30.0 // indirect
	gopkg.in/tomb.v2 v2.0.0-20161208151619-d5d1b5820637 // indirect
)

replace github.com/coldstart-go/coldstart => ../..
