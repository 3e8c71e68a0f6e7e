"""Serving a provider: :class:`ProviderServer` wires the provider's classes
to the contract services and serves them, with ``grpc.health.v1`` and
server reflection, on a Unix socket until shutdown.

The server is a ``grpc.aio`` server: identity, health and reflection are
answered on its event loop and never queue behind provider work. Plain
(synchronous) provider methods run on a thread pool; ``async def`` methods
run on the loop. When a caller gives up (cancels, or its deadline passes)
the call's :class:`CallContext` is marked cancelled, an ``async`` method is
cancelled, and a plain method that has not started yet never starts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import itertools
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

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

from . import endpoint as _endpoint
from . import paginate, validate
from .errors import ProviderError
from .fencing import FENCING_TOKEN_METADATA, FencingToken
from .provider import (
    CallContext,
    Clusters,
    Existence,
    Identity,
    Instances,
    LbAnswer,
    LoadBalancers,
    ProviderInfo,
    Readiness,
    Routes,
    ShutdownState,
    Volumes,
    Zones,
)
from .validate import Violation

#: The contract version reported in ``GetProviderInfo``.
CONTRACT_VERSION = "1.1.0"
#: Both directions accept messages up to this size, the contract's minimum
#: (grpc's own default for receiving is 4 MiB).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: The metadata key carrying the controller's request id.
REQUEST_ID_METADATA = "x-ccm-request-id"
#: The metadata key carrying the instant the controller gives up on a call,
#: in milliseconds since the Unix epoch.
DEADLINE_METADATA = "x-ccm-deadline"
TRACEPARENT_METADATA = "traceparent"
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


def trace_id_of(traceparent: object) -> str | None:
    """The trace id of a version-00 W3C ``traceparent``; None for anything
    else (neither id may be all zeros)."""
    if not isinstance(traceparent, str):
        return None
    m = _TRACEPARENT.fullmatch(traceparent.strip())
    if m is None or set(m.group(1)) == {"0"} or set(m.group(2)) == {"0"}:
        return None
    return m.group(1)


_REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"

log = logging.getLogger("ccmrs_provider")
T = TypeVar("T")
_ids = itertools.count(1)


class _Runtime:
    """What every adapter does with a call: read its context, run the
    provider, turn failures into the contract's statuses."""

    def __init__(self, max_workers: int) -> None:
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="provider"
        )
        # Probe gets its own threads so it never waits behind provider work.
        self.probe_executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="probe"
        )

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.probe_executor.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def context(context: grpc.aio.ServicerContext, method: str) -> CallContext:
        """The request id, deadline and fencing token of one call. A
        malformed fencing token is refused: a write whose sender cannot be
        told must not be applied."""
        metadata = {k: v for k, v in (context.invocation_metadata() or ())}
        request_id = metadata.get(REQUEST_ID_METADATA)
        if not isinstance(request_id, str) or not 0 < len(request_id) <= 128:
            request_id = f"sdk-{os.getpid()}-{next(_ids)}"
        remaining = context.time_remaining()
        deadline = None if remaining is None else time.monotonic() + remaining
        # grpc-timeout counts from when the request is read: a provider
        # paused past the caller's deadline must not act on what it gave up on.
        given_up = metadata.get(DEADLINE_METADATA)
        if isinstance(given_up, str) and given_up.isdigit():
            late_ms = time.time() * 1000 - int(given_up)
            if late_ms > 0:
                raise ProviderError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    None,
                    f"the caller gave up {late_ms:.0f} ms before this request was read"
                    f" ({DEADLINE_METADATA})",
                )
        token = None
        raw = metadata.get(FENCING_TOKEN_METADATA)
        if raw is not None:
            field = f"metadata[{FENCING_TOKEN_METADATA}]"
            if not isinstance(raw, str):
                raise ProviderError.invalid_request(field, "not printable ASCII")
            try:
                token = FencingToken.parse(raw)
            except ValueError as e:
                raise ProviderError.invalid_request(field, str(e)) from None
        return CallContext(
            method=method,
            request_id=request_id,
            deadline=deadline,
            fencing_token=token,
            trace_id=trace_id_of(metadata.get(TRACEPARENT_METADATA)),
        )

    async def call(
        self,
        ctx: CallContext,
        fn: Callable[..., Any],
        *args: Any,
        executor: concurrent.futures.Executor | None = None,
    ) -> Any:
        """Runs one provider method (plain or ``async``). Anything it raises
        but a ProviderError becomes INTERNAL (NotImplementedError:
        UNIMPLEMENTED), its details logged, not sent. A caller giving up
        cancels the awaiting task: :meth:`handle` marks ``ctx`` cancelled."""
        try:
            if inspect.iscoroutinefunction(fn):
                return await fn(ctx, *args)

            def run() -> Any:
                # Queued work whose caller left is never started.
                ctx.raise_if_cancelled()
                return fn(ctx, *args)

            loop = asyncio.get_running_loop()
            copied = contextvars.copy_context()
            result = await loop.run_in_executor(executor or self.executor, copied.run, run)
            if inspect.isawaitable(result):
                return await result
            return result
        except ProviderError:
            raise
        except NotImplementedError:
            raise ProviderError.unimplemented(f"{ctx.method} is not implemented") from None
        except Exception as e:
            ctx.log.exception("provider raised %s", type(e).__name__)
            raise ProviderError.internal(
                f"provider failed (request id {ctx.request_id}): {type(e).__name__}"
            ) from None

    async def handle(
        self,
        method: str,
        context: grpc.aio.ServicerContext,
        body: Callable[[CallContext], Awaitable[T]],
    ) -> T:
        request_id = ""
        try:
            ctx = self.context(context, method)
            request_id = ctx.request_id
            try:
                return await body(ctx)
            except asyncio.CancelledError:
                ctx.cancel()
                raise
        except Violation as v:
            error = ProviderError.invalid_request(v.field, v.problem)
        except ProviderError as e:
            error = e
        except Exception as e:  # an SDK bug; never an answer
            log.exception("%s (request id %s): SDK failure", method, request_id)
            error = ProviderError.internal(f"provider SDK failed: {type(e).__name__}")
        log.debug(
            "%s (request id %s) failed: code %s, reason %s: %s",
            method,
            request_id,
            error.code.name,
            error.reason,
            error,
        )
        await context.abort_with_status(error.to_grpc_status())
        raise AssertionError("unreachable")  # abort_with_status raises


def _rpc(body: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Makes ``async def Method(self, request, ctx)`` a grpc handler."""
    method = body.__name__

    @functools.wraps(body)
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> T:
        return await self._rt.handle(method, context, lambda ctx: body(self, request, ctx))

    return handler


def _check_answer(what: str, check: Callable[..., None], *args: Any) -> None:
    """Runs a ``validate`` check on a provider's answer. A violation is a
    provider bug, which must not reach the controller as a valid answer:
    INTERNAL naming the field."""
    try:
        check(*args)
    except Violation as v:
        raise ProviderError.internal(f"provider answered {what}: {v}") from None


def _expect(value: Any, kind: type[T] | tuple[type, ...], what: str) -> T:
    if not isinstance(value, kind):
        raise ProviderError.internal(
            f"provider answered {type(value).__name__} for {what}, expected "
            + (kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind))
        )
    return value  # type: ignore[return-value]


def _cluster_name(value: str) -> str:
    validate.name("cluster_name", value)
    return value


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
    """A Node whose providerID has another scheme (or is not a providerID)
    is refused before the provider sees it: a provider can only know that
    its own instance is gone, and NOT_EXISTS about another cloud's instance
    would make the controller delete the Node."""

    def __init__(self, rt: _Runtime, impl: Instances, scheme: str) -> None:
        self._rt = rt
        self._impl = impl
        self._prefix = scheme + "://"

    def _node(self, request: Any) -> types_pb2.NodeRef:
        node = validate.node_ref("node", validate.present(request, "node"))
        pid = node.provider_id
        if pid and (not pid.startswith(self._prefix) or len(pid) == len(self._prefix)):
            raise ProviderError.invalid_request(
                "node.provider_id",
                f"{pid!r} is not a providerID of this provider (scheme "
                f"{self._prefix[:-3]!r}); it can only answer for its own instances",
            )
        return node

    @_rpc
    async def InstanceExists(self, request: Any, ctx: CallContext) -> Any:
        node = self._node(request)
        answer = await self._rt.call(ctx, self._impl.instance_exists, node)
        if answer is True or answer is False:
            answer = Existence.EXISTS if answer else Existence.NOT_EXISTS
        answer = _expect(answer, Existence, "InstanceExists")
        return instances_pb2.InstanceExistsResponse(existence=answer.value)

    @_rpc
    async def InstanceShutdown(self, request: Any, ctx: CallContext) -> Any:
        node = self._node(request)
        answer = await self._rt.call(ctx, self._impl.instance_shutdown, node)
        answer = _expect(answer, ShutdownState, "InstanceShutdown")
        return instances_pb2.InstanceShutdownResponse(state=answer.value)

    @_rpc
    async def InstanceMetadata(self, request: Any, ctx: CallContext) -> Any:
        node = self._node(request)
        metadata = await self._rt.call(ctx, self._impl.instance_metadata, node)
        metadata = _expect(metadata, instances_pb2.InstanceMetadata, "InstanceMetadata")
        _check_answer("an invalid InstanceMetadata", validate.instance_metadata, metadata)
        return instances_pb2.InstanceMetadataResponse(metadata=metadata)


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

    @_rpc
    async def EnsureLoadBalancer(self, request: Any, ctx: CallContext) -> Any:
        cluster, service = self._target(request)
        validate.node_refs("nodes", request.nodes)
        answer = _lb_answer(
            await self._rt.call(
                ctx, self._impl.ensure_load_balancer, cluster, service, list(request.nodes)
            ),
            "EnsureLoadBalancer",
        )
        response = loadbalancer_pb2.EnsureLoadBalancerResponse(warnings=answer.warnings)
        if answer.implemented_elsewhere is not None:
            response.implemented_elsewhere.message = answer.implemented_elsewhere
            return response
        if answer.value is None:
            raise ProviderError.internal("provider answered EnsureLoadBalancer without a status")
        _check_answer("an invalid status", validate.load_balancer_status, "status", answer.value)
        response.status.CopyFrom(answer.value)
        return response

    @_rpc
    async def UpdateLoadBalancer(self, request: Any, ctx: CallContext) -> Any:
        cluster, service = self._target(request)
        validate.node_refs("nodes", request.nodes)
        answer = _lb_answer(
            await self._rt.call(
                ctx, self._impl.update_load_balancer, cluster, service, list(request.nodes)
            ),
            "UpdateLoadBalancer",
        )
        response = loadbalancer_pb2.UpdateLoadBalancerResponse(warnings=answer.warnings)
        if answer.implemented_elsewhere is not None:
            response.implemented_elsewhere.message = answer.implemented_elsewhere
        else:
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


# ---- the server ----


def _overrides(impl: object, base: type, method: str) -> bool:
    return getattr(type(impl), method, None) is not getattr(base, method)


def _check_identity(info: ProviderInfo, schema: identity_pb2.AnnotationSchema | None) -> None:
    """Refuses an identity the conformance suite would fail, at start."""
    problems = []
    if not validate.is_dns_label(info.name):
        problems.append(f"name {info.name!r} is not a DNS-1123 label of at most 63 characters")
    if not info.vendor_version:
        problems.append("vendor_version is empty")
    scheme = info.provider_id_scheme
    if not scheme or ":" in scheme or "/" in scheme:
        problems.append(f"provider_id_scheme {scheme!r} is not the part before '://'")
    if schema is not None:
        for p in schema.prefixes:
            if not p.endswith("/") or len(p) < 2:
                problems.append(f"annotation prefix {p!r} is not '<domain>/'")
        for k in schema.known_keys:
            if schema.prefixes and not any(k.startswith(p) for p in schema.prefixes):
                problems.append(f"known annotation key {k!r} is under none of the prefixes")
    if problems:
        raise ValueError("invalid provider identity: " + "; ".join(problems))


class ProviderServer:
    """A provider ready to serve: an :class:`Identity` plus the optional
    services handed to it. Capabilities are derived from what was handed
    over.

    ``socket_mode`` is the socket file's permission bits (0o600; 0o660 when
    the controller runs as another user of the same group). ``max_workers``
    bounds how many plain provider methods run at once. ``grace`` is how
    long shutdown waits for calls in flight, in seconds.

    ``identity.info()`` and ``identity.annotation_schema()`` are called
    once, here: the contract fixes GetProviderInfo and
    GetProviderCapabilities per ``vendor_version``, so both answers are
    built now and served as they are."""

    def __init__(
        self,
        identity: Identity,
        *,
        socket_mode: int = 0o600,
        max_workers: int = 32,
        grace: float = 30.0,
    ) -> None:
        if socket_mode & 0o007:
            raise ValueError(f"socket mode {socket_mode:04o} lets other users drive the cloud")
        info = identity.info()
        schema = identity.annotation_schema()
        _check_identity(info, schema)
        self._info = identity_pb2.GetProviderInfoResponse(
            name=info.name,
            vendor_version=info.vendor_version,
            provider_id_scheme=info.provider_id_scheme,
            contract_version=CONTRACT_VERSION,
            has_cluster_id=info.has_cluster_id,
            manifest=dict(info.manifest),
        )
        # The with_* methods add the capabilities.
        self._capabilities = identity_pb2.GetProviderCapabilitiesResponse(
            annotations=schema or identity_pb2.AnnotationSchema()
        )
        self.identity = identity
        self.socket_mode = socket_mode
        self.grace = grace
        self._rt = _Runtime(max_workers)
        self._services: list[tuple[str, Callable[[grpc.aio.Server], None]]] = []
        self._served = False

    def _add(self, name: str, register: Callable[[grpc.aio.Server], None], *caps: int) -> None:
        if self._served:
            raise RuntimeError("services are added before the server serves")
        if any(n == name for n, _ in self._services):
            raise ValueError(f"{name} was already added")
        self._services.append((name, register))
        self._capabilities.capabilities.extend(caps)

    def with_instances(self, impl: Instances) -> ProviderServer:
        adapter = _InstancesAdapter(self._rt, impl, self._info.provider_id_scheme)
        self._add(
            "ccmrs.cloudprovider.v1.InstancesService",
            functools.partial(instances_pb2_grpc.add_InstancesServiceServicer_to_server, adapter),
            identity_pb2.CAPABILITY_INSTANCES,
        )
        return self

    def with_load_balancers(self, impl: LoadBalancers) -> ProviderServer:
        listing = _overrides(impl, LoadBalancers, "list_load_balancers")
        caps = [identity_pb2.CAPABILITY_LOAD_BALANCERS]
        if listing:
            caps.append(identity_pb2.CAPABILITY_LIST_LOAD_BALANCERS)
        adapter = _LoadBalancersAdapter(self._rt, impl, listing)
        self._add(
            "ccmrs.cloudprovider.v1.LoadBalancerService",
            functools.partial(
                loadbalancer_pb2_grpc.add_LoadBalancerServiceServicer_to_server, adapter
            ),
            *caps,
        )
        return self

    def with_routes(self, impl: Routes) -> ProviderServer:
        caps = [identity_pb2.CAPABILITY_ROUTES]
        if impl.uses_target_node_addresses:
            caps.append(identity_pb2.CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES)
        adapter = _RoutesAdapter(self._rt, impl)
        self._add(
            "ccmrs.cloudprovider.v1.RoutesService",
            functools.partial(routes_pb2_grpc.add_RoutesServiceServicer_to_server, adapter),
            *caps,
        )
        return self

    def with_zones(self, impl: Zones) -> ProviderServer:
        adapter = _ZonesAdapter(self._rt, impl)
        self._add(
            "ccmrs.cloudprovider.v1.ZonesService",
            functools.partial(zones_pb2_grpc.add_ZonesServiceServicer_to_server, adapter),
            identity_pb2.CAPABILITY_ZONES,
        )
        return self

    def with_clusters(self, impl: Clusters) -> ProviderServer:
        adapter = _ClustersAdapter(self._rt, impl)
        self._add(
            "ccmrs.cloudprovider.v1.ClustersService",
            functools.partial(clusters_pb2_grpc.add_ClustersServiceServicer_to_server, adapter),
            identity_pb2.CAPABILITY_CLUSTERS,
        )
        return self

    def with_volumes(self, impl: Volumes) -> ProviderServer:
        adapter = _VolumesAdapter(self._rt, impl)
        self._add(
            "ccmrs.cloudprovider.v1.VolumesService",
            functools.partial(volumes_pb2_grpc.add_VolumesServiceServicer_to_server, adapter),
            identity_pb2.CAPABILITY_VOLUME_LABELS,
        )
        return self

    @property
    def capabilities(self) -> list[int]:
        """The capabilities this server advertises (``Capability`` values)."""
        return list(self._capabilities.capabilities)

    async def serve(
        self,
        endpoint: str,
        stop: asyncio.Event | None = None,
        *,
        started: Callable[[], None] | None = None,
    ) -> None:
        """Serves on ``endpoint`` until ``stop`` is set (forever if None),
        then stops taking calls, waits up to ``grace`` for those in flight,
        and removes the socket. ``started`` is called once calls are taken."""
        if self._served:
            raise RuntimeError("a ProviderServer serves once; build another one")
        self._served = True
        path = _endpoint.socket_path(endpoint)
        _endpoint.clear_stale_socket(path)
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ]
        )
        identity_name = "ccmrs.cloudprovider.v1.IdentityService"
        identity_pb2_grpc.add_IdentityServiceServicer_to_server(
            _IdentityAdapter(self._rt, self.identity, self._info, self._capabilities), server
        )
        for _, register in self._services:
            register(server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        names = [identity_name, *(n for n, _ in self._services)]
        for name in names:
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        _add_reflection(server, [*names, "grpc.health.v1.Health"])
        # The socket is created by the bind; keep it private until chmod.
        umask = os.umask(0o177)
        try:
            server.add_insecure_port("unix:" + path)
        finally:
            os.umask(umask)
        os.chmod(path, self.socket_mode)
        await server.start()
        if started is not None:
            started()
        log.info(
            "provider %s %s serving on %s, capabilities %s",
            self._info.name,
            self._info.vendor_version,
            path,
            [identity_pb2.Capability.Name(c) for c in self.capabilities],
        )
        try:
            if stop is None:
                await server.wait_for_termination()
            else:
                await stop.wait()
                log.info("draining calls in flight (up to %ss)", self.grace)
                await health_servicer.enter_graceful_shutdown()
        finally:
            await server.stop(self.grace)
            self._rt.shutdown()
            _endpoint.remove_socket(path)
            log.info("provider stopped")

    def serve_until_signal(self, endpoint: str) -> None:
        """Serves on ``endpoint`` until SIGTERM or SIGINT, then drains."""

        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await self.serve(endpoint, stop)

        asyncio.run(main())

    def start(self, endpoint: str) -> RunningServer:
        """Serves on ``endpoint`` from a background thread (tests, embedding);
        returns once the socket accepts calls."""
        return RunningServer(self, endpoint)


class RunningServer:
    """A :class:`ProviderServer` serving from a background thread. Use as a
    context manager, or call :meth:`stop`."""

    def __init__(self, server: ProviderServer, endpoint: str) -> None:
        self.endpoint = endpoint
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._server = server
        self._thread = threading.Thread(target=self._run, name="provider-server", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await self._server.serve(self.endpoint, self._stop, started=self._ready.set)

        try:
            asyncio.run(main())
        except BaseException as e:
            self._error = e
        finally:
            self._ready.set()

    def stop(self) -> None:
        """Stops taking calls, drains, removes the socket; returns when done."""
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _add_reflection(server: grpc.aio.Server, names: Iterable[str]) -> None:
    """Reflection, as ``grpc.reflection.v1`` (what current grpcurl asks for
    first) and ``v1alpha``: grpcio-reflection implements only v1alpha, whose
    messages are the same on the wire, so v1 is the same servicer under the
    other name."""
    service_names = [*names, reflection.SERVICE_NAME, _REFLECTION_V1]
    reflection.enable_server_reflection(service_names, server)
    servicer = reflection.aio.ReflectionServicer(service_names)
    handler = grpc.method_handlers_generic_handler(
        _REFLECTION_V1,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                servicer.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
