package fakeaws

import "fmt"

// CloudConfig is the k8s.io/cloud-provider-aws cloud config (gcfg) for a
// provider served against this fake at base (http://host:port): region and
// zone given, so no instance metadata is asked; the VPC, subnet and cluster
// id given, so the provider needs no instance of its own (the "master on
// another cloud" case); EC2, ELB, ELBv2, KMS and the instance metadata
// service all pointed at the fake.
func CloudConfig(c *Cloud, base string) string {
	s := fmt.Sprintf(`[Global]
Zone = %s
Region = %s
VPC = %s
SubnetID = %s
KubernetesClusterID = %s
`, c.Zone(), c.Region(), c.VPC(), c.Subnet(), c.cfg.ClusterID)
	for i, svc := range []struct{ id, signing string }{
		{"EC2", "ec2"},
		{"Elastic Load Balancing", "elasticloadbalancing"},
		{"Elastic Load Balancing v2", "elasticloadbalancing"},
		{"KMS", "kms"},
	} {
		s += fmt.Sprintf(`
[ServiceOverride "%d"]
Service = %s
Region = %s
URL = %s
SigningRegion = %s
SigningName = %s
`, i+1, svc.id, c.Region(), base, c.Region(), svc.signing)
	}
	s += fmt.Sprintf(`
[ServiceOverride "5"]
Service = ec2imds
Region = %s
URL = %s
SigningRegion = %s
`, c.Region(), base, c.Region())
	return s
}
