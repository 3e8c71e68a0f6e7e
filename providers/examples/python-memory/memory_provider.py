"""An in-memory cloud on the ccm-rs Python SDK: instances, load balancers (with listing),
routes and zones, kept in dicts. Run: memory_provider.py --endpoint unix:///tmp/p.sock --instance n1"""

import argparse
import ipaddress
import logging
import threading

import ccmrs_provider as sdk
from ccmrs_provider import ProviderError, pb

SCHEME, ZONE, REGION = "memory", "memory-zone-a", "memory-region"


class MemoryCloud(sdk.Identity, sdk.Instances, sdk.LoadBalancers, sdk.Routes, sdk.Zones):
    def __init__(self, instances, auto_create, pool, **declared):
        self.declared = declared  # contract 1.3.0: load_balancer_classes, serves_unclassed, platforms
        self.lock = threading.Lock()  # guards every dict below
        self.fence = sdk.Fence()
        self.auto_create = auto_create
        self.pool = list(ipaddress.ip_network(pool).hosts())[1:]  # the first host is the gateway
        self.instances = {}  # node name -> InstanceMetadata
        self.lbs = {}  # (cluster, Service uid) -> LoadBalancerSummary
        self.routes = {}  # (cluster, destination CIDR) -> Route
        for name in instances:
            self.add_instance(name)

    def info(self):
        return sdk.ProviderInfo(
            name="python-memory", vendor_version="0.1.0", provider_id_scheme=SCHEME, **self.declared
        )

    def add_instance(self, name):
        n = len(self.instances)
        instance = self.instances[name] = pb.InstanceMetadata(
            provider_id=f"{SCHEME}://{name}", instance_type="memory.small", zone=ZONE, region=REGION
        )
        ip = f"10.0.{n // 250}.{n % 250 + 1}"
        instance.node_addresses.add(type=pb.NODE_ADDRESS_TYPE_INTERNAL_IP, address=ip)
        return instance

    def find(self, node, required=True):
        """The node's instance (None if not required). The SDK refused other schemes."""
        with self.lock:
            if node.provider_id:  # a providerID we do not know is an instance that is gone
                found = next((i for i in self.instances.values() if i.provider_id == node.provider_id), None)
            elif node.name not in self.instances and self.auto_create:
                found = self.add_instance(node.name)
            else:
                found = self.instances.get(node.name)
        if found is None and required:
            raise ProviderError.instance_not_found(f"no instance for {node.name or node.provider_id}")
        return found

    def instance_exists(self, ctx, node):
        return sdk.Existence.EXISTS if self.find(node, required=False) else sdk.Existence.NOT_EXISTS

    def instance_shutdown(self, ctx, node):
        self.find(node)
        return sdk.ShutdownState.RUNNING

    def instance_metadata(self, ctx, node):
        return self.find(node)

    def zone_by_node_name(self, ctx, node_name):
        return pb.Zone(failure_domain=self.find(pb.NodeRef(name=node_name)).zone, region=REGION)

    def zone_by_provider_id(self, ctx, provider_id):
        return pb.Zone(failure_domain=self.find(pb.NodeRef(provider_id=provider_id)).zone, region=REGION)

    def commit(self, ctx, cluster, write):
        """Every write: not from a deposed leader, never after the caller gave up."""
        with self.lock:
            self.fence.admit(cluster, ctx.fencing_token)
            ctx.raise_if_cancelled()
            return write()

    def get_load_balancer(self, ctx, cluster, svc):
        with self.lock:
            lb = self.lbs.get((cluster, svc.uid))
            return lb.status if lb else None

    def ensure_load_balancer(self, ctx, cluster, svc, nodes):
        def write():
            key = (cluster, svc.uid)
            if key not in self.lbs:  # an existing one keeps its address
                used = {lb.status.ingress[0].ip for lb in self.lbs.values()}
                free = next((str(ip) for ip in self.pool if str(ip) not in used), None)
                if free is None:
                    raise ProviderError.quota_exceeded("no free load balancer address")
                lb = self.lbs[key] = pb.LoadBalancerSummary(service_uid=svc.uid, service_name=svc.name)
                lb.name = self.get_load_balancer_name(ctx, cluster, svc)
                lb.service_namespace = svc.namespace
                lb.status.ingress.add(ip=free)
            return self.lbs[key].status

        return self.commit(ctx, cluster, write)

    def update_load_balancer(self, ctx, cluster, svc, nodes):  # backends are not modelled
        if self.commit(ctx, cluster, lambda: (cluster, svc.uid) not in self.lbs):
            raise ProviderError.not_found("no load balancer to update; EnsureLoadBalancer creates it")

    def ensure_load_balancer_deleted(self, ctx, cluster, svc):
        self.commit(ctx, cluster, lambda: self.lbs.pop((cluster, svc.uid), None))

    def list_load_balancers(self, ctx, cluster):
        with self.lock:
            return [lb for (c, _), lb in self.lbs.items() if c == cluster]

    def list_routes(self, ctx, cluster):
        with self.lock:
            return [r for (c, _), r in self.routes.items() if c == cluster]

    def create_route(self, ctx, cluster, name_hint, route):
        self.find(pb.NodeRef(name=route.target_node))

        def write():
            key = (cluster, route.destination_cidr)
            existing = self.routes.get(key)
            if existing and existing.target_node != route.target_node:
                raise ProviderError.conflicting_resource(f"{key[1]} is routed to node {existing.target_node}")
            if not existing:
                route.name = f"route-{name_hint}-" + "".join(c if c.isalnum() else "-" for c in key[1])
                self.routes[key] = route
            return self.routes[key]

        return self.commit(ctx, cluster, write)

    def delete_route(self, ctx, cluster, route):
        key = (cluster, route.destination_cidr)
        self.commit(ctx, cluster, lambda: self.routes.pop(key, None))


def parse(argv=None):
    parser = argparse.ArgumentParser(description="An in-memory ccm-rs provider.")
    parser.add_argument("--endpoint", default=sdk.DEFAULT_ENDPOINT)
    parser.add_argument("--instance", action="append", default=[], help="a node whose instance exists")
    parser.add_argument("--auto-create", action="store_true", help="unknown node names get instances")
    parser.add_argument("--load-balancer-class", action="append", default=[], help="a class it serves")
    parser.add_argument("--unclassed-services", choices=["served", "declined"], help="default: unset")
    parser.add_argument("--platform", action="append", default=[], help="a KEP-5778 platform it manages")
    args = parser.parse_args(argv)
    unclassed = {None: None, "served": True, "declined": False}[args.unclassed_services]
    declared = dict(
        load_balancer_classes=args.load_balancer_class, serves_unclassed=unclassed, platforms=args.platform
    )
    return args.endpoint, MemoryCloud(args.instance, args.auto_create, pool="192.0.2.0/24", **declared)


def main():
    endpoint, cloud = parse()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server = sdk.ProviderServer(cloud).with_instances(cloud).with_load_balancers(cloud)
    server.with_routes(cloud).with_zones(cloud).serve_until_signal(endpoint)


if __name__ == "__main__":
    main()
