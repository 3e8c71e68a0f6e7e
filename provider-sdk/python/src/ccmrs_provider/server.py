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
import functools
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from ccmrs.cloudprovider.v1 import (
    clusters_pb2_grpc,
    identity_pb2,
    identity_pb2_grpc,
    instances_pb2_grpc,
    loadbalancer_pb2_grpc,
    routes_pb2_grpc,
    volumes_pb2_grpc,
    zones_pb2_grpc,
)

from . import endpoint as _endpoint
from . import validate
from .adapters import (
    _ClustersAdapter,
    _IdentityAdapter,
    _InstancesAdapter,
    _LoadBalancersAdapter,
    _RoutesAdapter,
    _VolumesAdapter,
    _ZonesAdapter,
)
from .calls import _Runtime
from .logs import configure_logging
from .provider import (
    Clusters,
    Identity,
    Instances,
    LoadBalancers,
    ProviderInfo,
    Routes,
    Volumes,
    Zones,
)

#: The contract version reported in ``GetProviderInfo``.
CONTRACT_VERSION = "1.4.0"
#: Both directions accept messages up to this size, the contract's minimum
#: (grpc's own default for receiving is 4 MiB).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

_REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"

log = logging.getLogger("ccmrs_provider")


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
    response = identity_pb2.GetProviderInfoResponse(
        provider_id_scheme=scheme,
        provider_id_schemes=info.provider_id_schemes(),
        load_balancer_classes=info.load_balancer_classes,
        platforms=info.platforms,
    )
    for attribute, check in [
        ("also_owns", validate.provider_id_schemes),
        ("load_balancer_classes", validate.load_balancer_classes),
        ("platforms", validate.platforms),
    ]:
        try:
            check(response)
        except validate.Violation as v:
            problems.append(f"{attribute} {list(getattr(info, attribute))!r}: {v}")
    if info.serves_unclassed not in (None, True, False):
        problems.append(f"serves_unclassed {info.serves_unclassed!r} is not None, True or False")
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
    long shutdown waits for calls in flight, in seconds. ``log_level``
    (a name such as ``"DEBUG"``, or a number) is the level of the stderr
    handler the server installs when it starts serving, unless the process
    configured logging itself; ``$CCMRS_LOG_LEVEL`` overrides it (see
    :func:`~ccmrs_provider.configure_logging`).

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
        log_level: int | str | None = None,
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
            provider_id_schemes=info.provider_id_schemes(),
            load_balancer_classes=info.load_balancer_classes,
            unclassed_services=info.unclassed_services(),
            platforms=info.platforms,
        )
        # The with_* methods add the capabilities.
        self._capabilities = identity_pb2.GetProviderCapabilitiesResponse(
            annotations=schema or identity_pb2.AnnotationSchema()
        )
        self.identity = identity
        self.socket_mode = socket_mode
        self.grace = grace
        self.log_level = log_level
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
        # BatchInstances is served for every provider: its own
        # batch_instances, else by fan-out over the single methods.
        adapter = _InstancesAdapter(
            self._rt,
            impl,
            list(self._info.provider_id_schemes) or [self._info.provider_id_scheme],
            native=_overrides(impl, Instances, "batch_instances"),
        )
        self._add(
            "ccmrs.cloudprovider.v1.InstancesService",
            functools.partial(instances_pb2_grpc.add_InstancesServiceServicer_to_server, adapter),
            identity_pb2.CAPABILITY_INSTANCES,
            identity_pb2.CAPABILITY_INSTANCES_BATCH,
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
        configure_logging(self.log_level)
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
