// Package mycloud stands for the package of a real cloud in the README's
// example provider (internal/example): it registers a cloud named
// "mycloud" when imported, as the packages of upstream cloud providers do.
// The cloud has no instances, load balancers or routes.
package mycloud

import (
	"io"

	cloudprovider "k8s.io/cloud-provider"
)

func init() {
	cloudprovider.RegisterCloudProvider("mycloud", func(io.Reader) (cloudprovider.Interface, error) {
		return cloud{}, nil
	})
}

type cloud struct{}

func (cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return nil, false }
func (cloud) Instances() (cloudprovider.Instances, bool)                        { return nil, false }
func (cloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return nil, false }
func (cloud) Zones() (cloudprovider.Zones, bool)                                { return nil, false }
func (cloud) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }
func (cloud) Routes() (cloudprovider.Routes, bool)                              { return nil, false }
func (cloud) ProviderName() string                                              { return "mycloud" }
func (cloud) HasClusterID() bool                                                { return true }
