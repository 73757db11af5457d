package etcdtest_test

import (
	"context"
	"fmt"

	"github.com/coldstart-go/coldstart/lease/etcdlease/etcdtest"
)

// A member outside a test (an Example, or a TestMain sharing one member
// between tests): stopped as a crash would stop it and restarted, it keeps
// its data and its address, and its client carries on.
func ExampleNewMember() {
	m, err := etcdtest.NewMember()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	ctx := context.Background()
	cli := m.Client()
	if _, err := cli.Put(ctx, "/config", "v1"); err != nil {
		fmt.Println(err)
		return
	}

	m.Stop()
	if err := m.Restart(); err != nil {
		fmt.Println(err)
		return
	}
	resp, err := cli.Get(ctx, "/config")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(resp.Kvs[0].Value))
	// Output: v1
}
