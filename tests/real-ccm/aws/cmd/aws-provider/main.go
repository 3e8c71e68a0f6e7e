// aws-provider serves the AWS cloud of the published module
// k8s.io/cloud-provider-aws (pkg/providers/v1, unchanged) through the ccm-rs
// Go adapter, wired the way its README says: the cloud made by
// cloudprovider.InitCloudProvider from its cloud config, then adapter.Serve.
//
// The cloud config decides where the cloud's EC2 and ELB calls go (its
// [ServiceOverride] sections); tests point them at fake-aws on loopback.
package main

import (
	"context"
	"flag"
	"log"
	"strings"

	cloudprovider "k8s.io/cloud-provider"
	// Registers the "aws" cloud with cloudprovider.
	awsv1 "k8s.io/cloud-provider-aws/pkg/providers/v1"

	"github.com/ccm-rs/ccm-rs/provider-sdk/go/adapter"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

func main() {
	endpoint := flag.String("endpoint", sdk.DefaultEndpoint, "unix:///absolute/path of the provider socket")
	cloudConfig := flag.String("cloud-config", "", "the AWS cloud config file (gcfg)")
	flag.Parse()

	cloud, err := cloudprovider.InitCloudProvider("aws", *cloudConfig)
	if err != nil {
		log.Fatalf("aws-provider: %v", err)
	}
	if cloud == nil {
		log.Fatalf("aws-provider: the aws cloud is not registered")
	}
	// Cluster access comes from $KUBECONFIG, which the adapter reads (the
	// cloud's Initialize takes a client, its SetInformers a Node informer).
	// The AWS cloud answers a missing instance with EC2's own
	// InvalidInstanceID.NotFound, which the module itself tells apart; its
	// route errors carry EC2's codes only in their text (wrapped with %q).
	opts := adapter.Options{
		Endpoint:           *endpoint,
		IsInstanceNotFound: awsv1.IsAWSErrorInstanceNotFound,
		IsRouteNotFound:    func(err error) bool { return strings.Contains(err.Error(), "InvalidRoute.NotFound") },
		IsRouteConflict:    func(err error) bool { return strings.Contains(err.Error(), "RouteAlreadyExists") },
	}
	if err := adapter.Serve(context.Background(), cloud, opts); err != nil {
		log.Fatalf("aws-provider: %v", err)
	}
}
