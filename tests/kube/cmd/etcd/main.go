// etcd's server at the version the k8s.io/kubernetes module of ../../go.mod
// is built against.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
