"""The contract's services as grpc servicers over the provider's classes:
each validates its request, runs the provider method through the
:class:`~ccmrs_provider.calls._Runtime`, checks the answer and builds the
response.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ccmrs.cloudprovider.v1 import (
    clusters_pb2,
    clusters_pb2_grpc,
    identity_pb2,
    identity_pb2_grpc,
    instances_pb2,
    instances_pb2_grpc,
    loadbalancer_pb2,
    loadbalancer_pb2_grpc,
    routes_pb2,
    routes_pb2_grpc,
    types_pb2,
    volumes_pb2,
    volumes_pb2_grpc,
    zones_pb2,
    zones_pb2_grpc,
)

from . import paginate, validate
from .calls import _check_answer, _cluster_name, _expect, _rpc, _Runtime
from .errors import ProviderError
from .provider import (
    CallContext,
    Clusters,
    Existence,
    Identity,
    Instances,
    LbAnswer,
    LoadBalancers,
    Readiness,
    Routes,
    ShutdownState,
    Volumes,
    Zones,
)
from .validate import Violation

#: How many single calls a BatchInstances answered by fan-out makes at once.
BATCH_CONCURRENCY = 16

# ---- IdentityService ----


class _IdentityAdapter(identity_pb2_grpc.IdentityServiceServicer):
    """GetProviderInfo and GetProviderCapabilities answer what
    :class:`ProviderServer` built once: no provider code runs for them."""

    def __init__(
        self,
        rt: _Runtime,
        identity: Identity,
        info: identity_pb2.GetProviderInfoResponse,
        capabilities: identity_pb2.GetProviderCapabilitiesResponse,
    ) -> None:
        self._rt = rt
        self._identity = identity
        self._info = info
        self._capabilities = capabilities

    async def GetProviderInfo(self, request: Any, context: Any) -> Any:
        return self._info

    async def GetProviderCapabilities(self, request: Any, context: Any) -> Any:
        return self._capabilities

    @_rpc
    async def Probe(self, request: Any, ctx: CallContext) -> Any:
        readiness = await self._rt.call(ctx, self._identity.probe, executor=self._rt.probe_executor)
        readiness = _expect(readiness, Readiness, "Probe")
        return identity_pb2.ProbeResponse(state=readiness.state, message=readiness.message)


# ---- InstancesService ----


class _InstancesAdapter(instances_pb2_grpc.InstancesServiceServicer):
    """A Node whose providerID has a scheme the provider does not own (or is
    not a providerID) is refused before the provider sees it: a provider can only know that
    its own instance is gone, and NOT_EXISTS about another cloud's instance
    would make the controller delete the Node.

    ``BatchInstances`` (contract 1.4.0) is the provider's ``batch_instances``
    when it overrides it (``native``), else each query asked of the single
    methods, :data:`BATCH_CONCURRENCY` at once; each query's answer goes
    through the same checks as the single call's, and its error becomes its
    ``QueryError``."""

    def __init__(self, rt: _Runtime, impl: Instances, schemes: list[str], native: bool) -> None:
        self._rt = rt
        self._impl = impl
        self._schemes = schemes
        self._native = native

    def _node(self, request: Any) -> types_pb2.NodeRef:
        node = validate.node_ref("node", validate.present(request, "node"))
        pid = node.provider_id
        if pid and not validate.is_owned_provider_id(pid, self._schemes):
            which = "scheme" if len(self._schemes) == 1 else "schemes"
            raise ProviderError.invalid_request(
                "node.provider_id",
                f"{pid!r} is not a providerID of this provider ({which} "
                f"{', '.join(map(repr, self._schemes))}); it can only answer for its own "
                "instances",
            )
        return node

    @staticmethod
    def _existence(answer: Any) -> Any:
        if answer is True or answer is False:
            answer = Existence.EXISTS if answer else Existence.NOT_EXISTS
        answer = _expect(answer, Existence, "InstanceExists")
        return instances_pb2.InstanceExistsResponse(existence=answer.value)

    @staticmethod
    def _shutdown(answer: Any) -> Any:
        answer = _expect(answer, ShutdownState, "InstanceShutdown")
        return instances_pb2.InstanceShutdownResponse(state=answer.value)

    def _metadata(self, metadata: Any, warnings: list[Any]) -> Any:
        metadata = _expect(metadata, instances_pb2.InstanceMetadata, "InstanceMetadata")
        _check_answer("an invalid InstanceMetadata", validate.instance_metadata, metadata)
        _check_answer(
            "an invalid InstanceMetadata", validate.owned_provider_id, metadata, self._schemes
        )
        _check_answer(
            "invalid warnings about the node", validate.node_warnings, "warnings", warnings
        )
        return instances_pb2.InstanceMetadataResponse(metadata=metadata, warnings=warnings)

    @_rpc
    async def InstanceExists(self, request: Any, ctx: CallContext) -> Any:
        node = self._node(request)
        return self._existence(await self._rt.call(ctx, self._impl.instance_exists, node))

    @_rpc
    async def InstanceShutdown(self, request: Any, ctx: CallContext) -> Any:
        node = self._node(request)
        return self._shutdown(await self._rt.call(ctx, self._impl.instance_shutdown, node))

    @_rpc
    async def InstanceMetadata(self, request: Any, ctx: CallContext) -> Any:
        node = self._node(request)
        metadata = await self._rt.call(ctx, self._impl.instance_metadata, node)
        return self._metadata(metadata, ctx.warnings)

    @_rpc
    async def BatchInstances(self, request: Any, ctx: CallContext) -> Any:
        validate.batch_instances_request(request)
        if self._native:
            results = await self._batch(ctx, list(request.queries))
        else:
            results = await self._fan_out(ctx, list(request.queries))
        return instances_pb2.BatchInstancesResponse(results=results)

    async def _fan_out(self, ctx: CallContext, queries: list[Any]) -> list[Any]:
        """Each query as its single call, with its own :class:`CallContext`
        (its warnings are its own), cancelled with the batch."""
        gate = asyncio.Semaphore(BATCH_CONCURRENCY)
        contexts: list[CallContext] = []

        async def one(q: Any) -> Any:
            async with gate:
                method, single = self._single(q.question)
                qctx = ctx._child(method)
                contexts.append(qctx)
                if ctx.cancelled:
                    qctx.cancel()
                try:
                    node = self._node(q)
                    answer = await self._rt.call(qctx, single, node)
                    return self._result(q, answer, qctx.warnings)
                except (ProviderError, Violation) as e:
                    return _error_result(q.key, e)

        try:
            return list(await asyncio.gather(*(one(q) for q in queries)))
        except asyncio.CancelledError:
            for c in contexts:
                c.cancel()
            raise

    def _single(self, question: int) -> tuple[str, Any]:
        if question == instances_pb2.INSTANCE_QUESTION_EXISTENCE:
            return "InstanceExists", self._impl.instance_exists
        if question == instances_pb2.INSTANCE_QUESTION_SHUTDOWN:
            return "InstanceShutdown", self._impl.instance_shutdown
        return "InstanceMetadata", self._impl.instance_metadata

    def _result(self, q: Any, answer: Any, warnings: list[Any]) -> Any:
        """The result of query ``q`` the provider answered ``answer``: what
        the single call answers for it (a bad answer raises INTERNAL)."""
        if isinstance(answer, ProviderError):
            raise answer
        if q.question == instances_pb2.INSTANCE_QUESTION_EXISTENCE:
            return instances_pb2.InstanceResult(key=q.key, existence=self._existence(answer))
        if q.question == instances_pb2.INSTANCE_QUESTION_SHUTDOWN:
            return instances_pb2.InstanceResult(key=q.key, shutdown=self._shutdown(answer))
        if isinstance(answer, instances_pb2.InstanceMetadataResponse):
            metadata = answer.metadata if answer.HasField("metadata") else None
            answer, warnings = metadata, list(answer.warnings)
        return instances_pb2.InstanceResult(key=q.key, metadata=self._metadata(answer, warnings))

    async def _batch(self, ctx: CallContext, queries: list[Any]) -> list[Any]:
        """The provider's own batch_instances over the queries whose Node it
        may judge; the others fail as their single calls would."""
        results: dict[str, Any] = {}
        asked = []
        for q in queries:
            try:
                self._node(q)
                asked.append(q)
            except (ProviderError, Violation) as e:
                results[q.key] = _error_result(q.key, e)
        if asked:
            try:
                answers = await self._rt.call(ctx, self._impl.batch_instances, asked)
                answers = _expect(answers, Mapping, "BatchInstances")
            except ProviderError as e:
                if not results:
                    raise
                # The queries refused above keep their own errors.
                answers = {q.key: e for q in asked}
            for q in asked:
                if q.key not in answers:
                    results[q.key] = _error_result(
                        q.key, ProviderError.internal("provider answered no result for this query")
                    )
                    continue
                try:
                    results[q.key] = self._result(q, answers[q.key], [])
                except ProviderError as e:
                    results[q.key] = _error_result(q.key, e)
        return [results[q.key] for q in queries]


def _error_result(key: str, error: ProviderError | Violation) -> Any:
    if isinstance(error, Violation):
        error = ProviderError.invalid_request(error.field, error.problem)
    return instances_pb2.InstanceResult(key=key, error=error.to_query_error())


# ---- LoadBalancerService ----


def _lb_answer(value: Any, what: str) -> LbAnswer:
    """An :class:`LbAnswer`; a bare status (or None) is a done one."""
    value = _expect(value, (LbAnswer, types_pb2.LoadBalancerStatus, type(None)), what)
    answer = value if isinstance(value, LbAnswer) else LbAnswer.done(value)
    _check_answer("an invalid warning", validate.warnings, "warnings", answer.warnings)
    return answer


class _LoadBalancersAdapter(loadbalancer_pb2_grpc.LoadBalancerServiceServicer):
    def __init__(self, rt: _Runtime, impl: LoadBalancers, listing: bool) -> None:
        self._rt = rt
        self._impl = impl
        self._listing = listing

    @staticmethod
    def _target(request: Any) -> tuple[str, types_pb2.Service]:
        """Ensure and Update: the Service with at least one port."""
        cluster = _cluster_name(request.cluster_name)
        return cluster, validate.service("service", validate.present(request, "service"))

    @staticmethod
    def _target_ref(request: Any) -> tuple[str, types_pb2.Service]:
        """Reads and the delete: ports are not needed to find a load balancer."""
        cluster = _cluster_name(request.cluster_name)
        return cluster, validate.service_ref("service", validate.present(request, "service"))

    @_rpc
    async def GetLoadBalancer(self, request: Any, ctx: CallContext) -> Any:
        cluster, service = self._target_ref(request)
        status = await self._rt.call(ctx, self._impl.get_load_balancer, cluster, service)
        if status is None:
            return loadbalancer_pb2.GetLoadBalancerResponse(
                existence=loadbalancer_pb2.LOAD_BALANCER_EXISTENCE_NOT_EXISTS
            )
        status = _expect(status, types_pb2.LoadBalancerStatus, "GetLoadBalancer")
        _check_answer("an invalid status", validate.load_balancer_status, "status", status)
        return loadbalancer_pb2.GetLoadBalancerResponse(
            existence=loadbalancer_pb2.LOAD_BALANCER_EXISTENCE_EXISTS, status=status
        )

    @_rpc
    async def GetLoadBalancerName(self, request: Any, ctx: CallContext) -> Any:
        cluster, service = self._target_ref(request)
        name = await self._rt.call(ctx, self._impl.get_load_balancer_name, cluster, service)
        if not _expect(name, str, "GetLoadBalancerName"):
            raise ProviderError.internal("provider answered an empty load balancer name")
        return loadbalancer_pb2.GetLoadBalancerNameResponse(name=name)

    async def _over_nodes(
        self, ctx: CallContext, request: Any, method: Any, what: str, response_type: Any
    ) -> tuple[LbAnswer, Any]:
        """Ensure and Update: the provider's answer for the Service and its
        nodes, and the response with its warnings and, if it says so,
        implemented_elsewhere."""
        cluster, service = self._target(request)
        validate.node_refs("nodes", request.nodes)
        answer = _lb_answer(
            await self._rt.call(ctx, method, cluster, service, list(request.nodes)), what
        )
        response = response_type(warnings=answer.warnings)
        if answer.implemented_elsewhere is not None:
            response.implemented_elsewhere.message = answer.implemented_elsewhere
        return answer, response

    @_rpc
    async def EnsureLoadBalancer(self, request: Any, ctx: CallContext) -> Any:
        answer, response = await self._over_nodes(
            ctx,
            request,
            self._impl.ensure_load_balancer,
            "EnsureLoadBalancer",
            loadbalancer_pb2.EnsureLoadBalancerResponse,
        )
        if answer.implemented_elsewhere is not None:
            return response
        if answer.value is None:
            raise ProviderError.internal("provider answered EnsureLoadBalancer without a status")
        _check_answer("an invalid status", validate.load_balancer_status, "status", answer.value)
        response.status.CopyFrom(answer.value)
        return response

    @_rpc
    async def UpdateLoadBalancer(self, request: Any, ctx: CallContext) -> Any:
        answer, response = await self._over_nodes(
            ctx,
            request,
            self._impl.update_load_balancer,
            "UpdateLoadBalancer",
            loadbalancer_pb2.UpdateLoadBalancerResponse,
        )
        if answer.implemented_elsewhere is None:
            response.updated.SetInParent()
        return response

    @_rpc
    async def EnsureLoadBalancerDeleted(self, request: Any, ctx: CallContext) -> Any:
        cluster, service = self._target_ref(request)
        warnings = await self._rt.call(
            ctx, self._impl.ensure_load_balancer_deleted, cluster, service
        )
        warnings = list(warnings or ())
        _check_answer("an invalid warning", validate.warnings, "warnings", warnings)
        return loadbalancer_pb2.EnsureLoadBalancerDeletedResponse(warnings=warnings)

    @_rpc
    async def ListLoadBalancers(self, request: Any, ctx: CallContext) -> Any:
        if not self._listing:
            raise ProviderError.unimplemented("ListLoadBalancers is not supported")
        cluster = _cluster_name(request.cluster_name)
        entries = list(await self._rt.call(ctx, self._impl.list_load_balancers, cluster))
        for i, e in enumerate(entries):
            _expect(e, loadbalancer_pb2.LoadBalancerSummary, "a ListLoadBalancers entry")
            for name, value in [("name", e.name), ("service_uid", e.service_uid)]:
                _check_answer(
                    "an invalid listing", validate.name, f"load_balancers[{i}].{name}", value
                )
        page, token = paginate.page(
            entries,
            lambda e: e.service_uid,
            request.page_size,
            request.page_token,
            what="the load balancer of Service uid",
        )
        return loadbalancer_pb2.ListLoadBalancersResponse(
            load_balancers=page, next_page_token=token
        )


# ---- RoutesService ----


class _RoutesAdapter(routes_pb2_grpc.RoutesServiceServicer):
    def __init__(self, rt: _Runtime, impl: Routes) -> None:
        self._rt = rt
        self._impl = impl

    @_rpc
    async def ListRoutes(self, request: Any, ctx: CallContext) -> Any:
        cluster = _cluster_name(request.cluster_name)
        routes = list(await self._rt.call(ctx, self._impl.list_routes, cluster))
        for r in routes:
            _expect(r, routes_pb2.Route, "a ListRoutes entry")
        page, token = paginate.page(
            routes,
            lambda r: r.destination_cidr,
            request.page_size,
            request.page_token,
            what="a route for",
        )
        return routes_pb2.ListRoutesResponse(routes=page, next_page_token=token)

    @_rpc
    async def CreateRoute(self, request: Any, ctx: CallContext) -> Any:
        cluster = _cluster_name(request.cluster_name)
        validate.name("name_hint", request.name_hint)
        route = validate.route("route", validate.present(request, "route"))
        if route.blackhole:
            raise Violation("route.blackhole", "cannot create a blackhole route")
        created = await self._rt.call(
            ctx, self._impl.create_route, cluster, request.name_hint, route
        )
        if created is None:
            return routes_pb2.CreateRouteResponse()
        return routes_pb2.CreateRouteResponse(route=_expect(created, routes_pb2.Route, "a route"))

    @_rpc
    async def DeleteRoute(self, request: Any, ctx: CallContext) -> Any:
        cluster = _cluster_name(request.cluster_name)
        route = validate.route("route", validate.present(request, "route"))
        await self._rt.call(ctx, self._impl.delete_route, cluster, route)
        return routes_pb2.DeleteRouteResponse()


# ---- ZonesService, VolumesService, ClustersService ----


class _ZonesAdapter(zones_pb2_grpc.ZonesServiceServicer):
    def __init__(self, rt: _Runtime, impl: Zones) -> None:
        self._rt = rt
        self._impl = impl

    @_rpc
    async def GetZoneByProviderId(self, request: Any, ctx: CallContext) -> Any:
        validate.name("provider_id", request.provider_id)
        zone = await self._rt.call(ctx, self._impl.zone_by_provider_id, request.provider_id)
        return zones_pb2.GetZoneByProviderIdResponse(zone=_expect(zone, zones_pb2.Zone, "a zone"))

    @_rpc
    async def GetZoneByNodeName(self, request: Any, ctx: CallContext) -> Any:
        validate.name("node_name", request.node_name)
        zone = await self._rt.call(ctx, self._impl.zone_by_node_name, request.node_name)
        return zones_pb2.GetZoneByNodeNameResponse(zone=_expect(zone, zones_pb2.Zone, "a zone"))


class _VolumesAdapter(volumes_pb2_grpc.VolumesServiceServicer):
    def __init__(self, rt: _Runtime, impl: Volumes) -> None:
        self._rt = rt
        self._impl = impl

    @_rpc
    async def GetVolumeLabels(self, request: Any, ctx: CallContext) -> Any:
        volume = validate.volume("volume", validate.present(request, "volume"))
        labels = dict(await self._rt.call(ctx, self._impl.get_volume_labels, volume) or {})
        _check_answer("invalid volume labels", validate.labels, "labels", labels)
        return volumes_pb2.GetVolumeLabelsResponse(labels=labels)


class _ClustersAdapter(clusters_pb2_grpc.ClustersServiceServicer):
    def __init__(self, rt: _Runtime, impl: Clusters) -> None:
        self._rt = rt
        self._impl = impl

    @_rpc
    async def ListClusters(self, request: Any, ctx: CallContext) -> Any:
        names = list(await self._rt.call(ctx, self._impl.list_clusters))
        return clusters_pb2.ListClustersResponse(cluster_names=names)

    @_rpc
    async def Master(self, request: Any, ctx: CallContext) -> Any:
        cluster = _cluster_name(request.cluster_name)
        address = await self._rt.call(ctx, self._impl.master, cluster)
        if not _expect(address, str, "Master"):
            raise ProviderError.internal("provider answered an empty control-plane address")
        return clusters_pb2.MasterResponse(address=address)
