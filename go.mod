module github.com/coldstart-go/coldstart

go 1.25.0

require (
	github.com/juju/clock v1.1.1
	github.com/juju/errors v1.0.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	golang.org/x/time v0.15.0
)

require (
	github.com/juju/loggo v0.0.0-20210728185423-eebad3a902c4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
