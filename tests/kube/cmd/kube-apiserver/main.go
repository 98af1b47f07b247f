// The kube-apiserver of the k8s.io/kubernetes module named in ../../go.mod,
// as upstream's cmd/kube-apiserver builds it.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
