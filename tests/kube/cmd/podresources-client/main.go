// podresources-client: a client of the kubelet's PodResources v1 API
// written against the kubelet's published proto
// (k8s.io/kubelet/pkg/apis/podresources/v1, the release line named in
// ../../go.mod), dialled as the kubelet's own GetV1Client dials
// (pkg/kubelet/apis/podresources/client.go). The integration tests use it
// to check that topomgr's server answers what a kubelet client expects.
//
// Usage:
//
//	podresources-client -socket PATH list
//	podresources-client -socket PATH allocatable
//	podresources-client -socket PATH get NAMESPACE NAME
//
// Prints the response as JSON (protojson, field names as in the proto) on
// stdout; a failed call prints `code: message` of the gRPC status on
// stderr and exits 1; bad usage exits 2.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: podresources-client -socket PATH list | allocatable | get NAMESPACE NAME")
	os.Exit(2)
}

func main() {
	socket := flag.String("socket", "", "the PodResources unix socket")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of the call")
	flag.Parse()
	args := flag.Args()
	if *socket == "" || len(args) == 0 {
		usage()
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+*socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", *socket)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16*1024*1024)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot dial %s: %v\n", *socket, err)
		os.Exit(1)
	}
	defer conn.Close()
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	var resp proto.Message
	switch {
	case args[0] == "list" && len(args) == 1:
		resp, err = client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	case args[0] == "allocatable" && len(args) == 1:
		resp, err = client.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	case args[0] == "get" && len(args) == 3:
		resp, err = client.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodNamespace: args[1], PodName: args[2]})
	default:
		usage()
	}
	if err != nil {
		s := status.Convert(err)
		fmt.Fprintf(os.Stderr, "%s: %s\n", s.Code(), s.Message())
		os.Exit(1)
	}
	out, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(resp)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot encode the response: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
