import sys

from ccmrs_provider import (
    Existence,
    Identity,
    Instances,
    ProviderError,
    ProviderInfo,
    ProviderServer,
    ShutdownState,
    pb,
)


class TinyCloud(Identity, Instances):
    """Every node named "vm-<n>" is an instance; nothing else exists."""

    def info(self):
        return ProviderInfo(name="tiny", vendor_version="0.1.0", provider_id_scheme="tiny")

    # The SDK refuses a Node whose providerID has another scheme before it
    # reaches this code: NOT_EXISTS is only ever said about our own instances.
    def instance_id(self, node):
        id = node.provider_id.removeprefix("tiny://") or node.name
        if not id.startswith("vm-"):
            raise ProviderError.instance_not_found(f"no instance for {node.name}")
        return id

    def instance_exists(self, ctx, node):
        try:
            self.instance_id(node)
            return Existence.EXISTS
        except ProviderError:
            return Existence.NOT_EXISTS

    def instance_shutdown(self, ctx, node):
        self.instance_id(node)
        return ShutdownState.RUNNING

    def instance_metadata(self, ctx, node):
        return pb.InstanceMetadata(
            provider_id=f"tiny://{self.instance_id(node)}",
            instance_type="tiny.small",
            node_addresses=[
                pb.NodeAddress(type=pb.NODE_ADDRESS_TYPE_INTERNAL_IP, address="10.0.0.10")
            ],
            zone="tiny-a",
            region="tiny",
        )


if __name__ == "__main__":
    cloud = TinyCloud()
    endpoint = sys.argv[1] if len(sys.argv) > 1 else "unix:///var/run/cloud-provider/provider.sock"
    ProviderServer(cloud).with_instances(cloud).serve_until_signal(endpoint)
