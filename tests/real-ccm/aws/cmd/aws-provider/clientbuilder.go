package main

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cloudprovider "k8s.io/cloud-provider"
)

// clientBuilder is the Kubernetes client the AWS cloud's Initialize asks
// for (it records Events with it), made from a kubeconfig. The one place
// this program wires cluster access, so it can move to the adapter.
func clientBuilder(kubeconfig string) (cloudprovider.ControllerClientBuilder, error) {
	if kubeconfig == "" {
		return nil, fmt.Errorf("no kubeconfig (--kubeconfig or KUBECONFIG): the AWS cloud's Initialize needs a Kubernetes client")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return builder{cfg}, nil
}

type builder struct{ cfg *rest.Config }

func (b builder) Config(name string) (*rest.Config, error) {
	c := rest.CopyConfig(b.cfg)
	c.UserAgent = rest.DefaultKubernetesUserAgent() + "/" + name
	return c, nil
}

func (b builder) ConfigOrDie(name string) *rest.Config {
	c, _ := b.Config(name)
	return c
}

func (b builder) Client(name string) (kubernetes.Interface, error) {
	c, _ := b.Config(name)
	return kubernetes.NewForConfig(c)
}

func (b builder) ClientOrDie(name string) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(b.ConfigOrDie(name))
}
