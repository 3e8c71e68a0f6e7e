package adapter_test

import (
	"context"
	"flag"
	"log"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccm-rs/ccm-rs/provider-sdk/go/adapter"
)

// The main function of a provider serving the cloud of an existing
// in-process cloud-controller-manager; the cloud registers itself when its
// package is imported, as for the upstream CCM (for example
// `import _ "example.com/mycloud/provider"`). provider-sdk/go/README.md
// shows it as a whole program; this copy is compiled by the tests.
func Example() {
	endpoint := flag.String("endpoint", "unix:///var/run/cloud-provider/provider.sock", "the provider socket")
	config := flag.String("cloud-config", "", "the cloud's configuration file")
	flag.Parse()
	cloud, err := cloudprovider.InitCloudProvider("mycloud", *config)
	if err != nil {
		log.Fatal(err)
	}
	if err := adapter.Serve(context.Background(), cloud, adapter.Options{Endpoint: *endpoint}); err != nil {
		log.Fatal(err)
	}
}
