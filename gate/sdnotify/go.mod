module github.com/coldstart-go/coldstart/gate/sdnotify

go 1.25.0

require (
	github.com/coldstart-go/coldstart v0.0.0
	github.com/coreos/go-systemd/v22 v22.7.0
	github.com/juju/clock v1.1.1
	github.com/juju/errors v1.0.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/juju/loggo v0.0.0-20210728185423-eebad3a902c4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.1.0 // indirect
)

replace github.com/coldstart-go/coldstart => ../..
