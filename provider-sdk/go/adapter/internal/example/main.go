// A provider serving the cloud of an existing cloud-controller-manager
// through the ccm-rs Go adapter. provider-sdk/go/README.md shows this
// file as it is, and the adapter's tests build and run it.
package main

import (
	"context"
	"flag"
	"log"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccm-rs/ccm-rs/provider-sdk/go/adapter"
	// Your cloud's package, which registers it by name as for the upstream
	// CCM (for example "example.com/mycloud/provider"); this one is a
	// stand-in.
	_ "github.com/ccm-rs/ccm-rs/provider-sdk/go/adapter/internal/mycloud"
)

func main() {
	endpoint := flag.String("endpoint", "unix:///var/run/cloud-provider/provider.sock", "the provider socket")
	config := flag.String("cloud-config", "", "the cloud's configuration file")
	flag.Parse()
	cloud, err := cloudprovider.InitCloudProvider("mycloud", *config)
	if err != nil {
		log.Fatal(err)
	}
	// Cluster access for the cloud: $KUBECONFIG (see the README).
	if err := adapter.Serve(context.Background(), cloud, adapter.Options{Endpoint: *endpoint}); err != nil {
		log.Fatal(err)
	}
}
