"""What a provider implements: one abstract class per contract service.

Only :class:`Identity` is required; every other service is opted into by
handing an implementation to :class:`~ccmrs_provider.ProviderServer`, which
derives the advertised capabilities from what it was given. Requests are
validated before a method is called (REQUIRED fields present, enums known,
IPs and CIDRs parse), so implementations can rely on them.

Methods may be plain functions (run on the SDK's thread pool) or
coroutines (``async def``, run on the server's event loop and cancelled
when the caller gives up). Each receives a :class:`CallContext` first.
Failures are raised as :class:`~ccmrs_provider.ProviderError`.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ccmrs.cloudprovider.v1 import (
    identity_pb2,
    loadbalancer_pb2,
    routes_pb2,
    types_pb2,
    volumes_pb2,
    zones_pb2,
)
from ccmrs.cloudprovider.v1 import instances_pb2 as _instances_pb2

from .errors import ProviderError
from .fencing import FencingToken


class CallContext:
    """Per-call information: the controller's request id, the deadline, the
    fencing token of a mutation, and whether the caller has given up."""

    def __init__(
        self,
        *,
        method: str = "",
        request_id: str = "",
        deadline: float | None = None,
        fencing_token: FencingToken | None = None,
        trace_id: str | None = None,
    ) -> None:
        #: The RPC's name, for example ``EnsureLoadBalancer``.
        self.method = method
        #: The controller's ``x-ccm-request-id``, or one the SDK generated.
        self.request_id = request_id
        #: When the caller stops waiting, on the :func:`time.monotonic` clock;
        #: None when it did not say.
        self.deadline = deadline
        #: Mutations from a controller running with leader election: who sent
        #: it, in which term. See :class:`~ccmrs_provider.Fence`.
        self.fencing_token = fencing_token
        #: The caller's W3C trace id (32 lowercase hex digits) from a valid
        #: ``traceparent``, to join its trace; None without one.
        self.trace_id = trace_id
        #: A logger whose records carry ``request_id`` and ``method``.
        self.log = logging.LoggerAdapter(
            logging.getLogger("ccmrs_provider.call"),
            {"request_id": request_id, "method": method},
        )
        self._cancelled = threading.Event()
        #: What the provider wants the user to know about the Node of an
        #: ``instance_metadata`` call; see :meth:`warn`.
        self.warnings: list[types_pb2.Warning] = []

    def warn(self, reason: str, message: str) -> None:
        """Tells the user something about the Node of an ``instance_metadata``
        call (contract 1.2.0): the controller publishes each warning as a
        Warning Event on the Node. ``reason`` is CamelCase (for example
        ``MaintenanceScheduled``); no secrets in ``message``. At most 16: the
        SDK refuses to send more, or a malformed one, as a provider bug.
        Other methods ignore these (load balancer mutations return theirs in
        :class:`LbAnswer`)."""
        self.warnings.append(types_pb2.Warning(reason=reason, message=message))

    def __repr__(self) -> str:
        return f"CallContext(method={self.method!r}, request_id={self.request_id!r})"

    def _child(self, method: str) -> CallContext:
        """The context of one query of a batch answered by ``method``: the
        same request id, deadline, fencing token and trace id, its own
        warnings. The SDK cancels it with the batch."""
        return CallContext(
            method=method,
            request_id=self.request_id,
            deadline=self.deadline,
            fencing_token=self.fencing_token,
            trace_id=self.trace_id,
        )

    @property
    def cancelled(self) -> bool:
        """True once the caller has given up (cancelled, or its deadline
        passed). A provider stops the cloud operation then."""
        return self._cancelled.is_set()

    def time_remaining(self) -> float | None:
        """Seconds until the deadline (never negative), or None."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def wait(self, seconds: float) -> bool:
        """Sleeps up to ``seconds``, waking early when the caller gives up;
        True if it did. For providers polling a cloud operation."""
        return self._cancelled.wait(seconds)

    def raise_if_cancelled(self) -> None:
        """Raises ``ProviderError.cancelled()`` if the caller has given up:
        call it just before committing a write."""
        if self.cancelled:
            raise ProviderError.cancelled()

    def cancel(self) -> None:
        """Marks the call as given up (the SDK calls it)."""
        self._cancelled.set()


@dataclass
class ProviderInfo:
    """Who the provider is (``GetProviderInfo``)."""

    #: A DNS-1123 label of at most 63 characters.
    name: str
    vendor_version: str
    #: The providerID scheme, the part before ``://``: of the providerIDs
    #: the provider sets by default.
    provider_id_scheme: str
    #: Whether resources are scoped by cluster name; None means true.
    has_cluster_id: bool | None = None
    #: Diagnostics only; no secrets.
    manifest: Mapping[str, str] = field(default_factory=dict)
    #: Further providerID schemes the provider owns (contract 1.2.0), for
    #: example ``("hrobot",)`` beside ``"hcloud"``: a Node with one reaches
    #: :class:`Instances` rather than being refused as another cloud's.
    also_owns: Sequence[str] = ()
    #: The ``spec.loadBalancerClass`` values whose Services the provider
    #: serves (contract 1.3.0), for example ``("example.com/cloud",)``: a
    #: controller running several providers sends it those Services. Each
    #: with a DNS-subdomain prefix, at most 32, none twice.
    load_balancer_classes: Sequence[str] = ()
    #: Whether the provider serves Services without a class when the
    #: controller makes it the default (contract 1.3.0): None says nothing
    #: (served, as before 1.3.0), False declines them (a provider of named
    #: classes only), True says it serves them.
    serves_unclassed: bool | None = None
    #: The KEP-5778 platforms the provider manages (contract 1.3.0), for
    #: example ``("cloud",)``: a Node without a providerID whose
    #: ``cloudprovider.kubernetes.io/platform`` label or annotation names one
    #: is its to initialise. DNS-1123 labels, at most 16, none twice.
    platforms: Sequence[str] = ()

    def provider_id_schemes(self) -> list[str]:
        """``GetProviderInfo.provider_id_schemes``: empty for one scheme, else
        ``provider_id_scheme`` and then the others."""
        if not self.also_owns:
            return []
        return [self.provider_id_scheme, *self.also_owns]

    def unclassed_services(self) -> int:
        """``GetProviderInfo.unclassed_services`` of ``serves_unclassed``."""
        if self.serves_unclassed is None:
            return identity_pb2.UNCLASSED_SERVICES_UNSPECIFIED
        if self.serves_unclassed:
            return identity_pb2.UNCLASSED_SERVICES_SERVED
        return identity_pb2.UNCLASSED_SERVICES_DECLINED


@dataclass(frozen=True)
class Readiness:
    """A provider's readiness (``Probe``)."""

    state: int
    message: str = ""

    @classmethod
    def ready(cls) -> Readiness:
        return cls(identity_pb2.PROBE_STATE_READY)

    @classmethod
    def starting(cls, message: str) -> Readiness:
        """Still initialising; expects to become ready."""
        return cls(identity_pb2.PROBE_STATE_STARTING, message)

    @classmethod
    def not_ready(cls, message: str) -> Readiness:
        """Cannot serve (for example invalid credentials); says why."""
        return cls(identity_pb2.PROBE_STATE_NOT_READY, message)


class Existence(enum.Enum):
    """Whether an instance exists. No "unspecified": the controller deletes
    the Node on NOT_EXISTS, so only an explicit answer counts."""

    EXISTS = _instances_pb2.INSTANCE_EXISTENCE_EXISTS
    #: The cloud positively knows the instance is gone: the Node is deleted.
    NOT_EXISTS = _instances_pb2.INSTANCE_EXISTENCE_NOT_EXISTS


class ShutdownState(enum.Enum):
    """Whether an instance is shut down."""

    RUNNING = _instances_pb2.INSTANCE_SHUTDOWN_STATE_RUNNING
    SHUT_DOWN = _instances_pb2.INSTANCE_SHUTDOWN_STATE_SHUT_DOWN


@dataclass
class LbAnswer:
    """A load balancer mutation's answer: ``value`` (the status of an
    ensure, None for an update), or ``implemented_elsewhere`` (a message
    saying who handles it), and warnings for the user."""

    value: types_pb2.LoadBalancerStatus | None = None
    implemented_elsewhere: str | None = None
    warnings: list[types_pb2.Warning] = field(default_factory=list)

    @classmethod
    def done(cls, value: types_pb2.LoadBalancerStatus | None = None) -> LbAnswer:
        return cls(value=value)

    @classmethod
    def elsewhere(cls, message: str) -> LbAnswer:
        """``cloudprovider.ImplementedElsewhere``; the message is for humans."""
        return cls(implemented_elsewhere=message)

    def warn(self, reason: str, message: str) -> LbAnswer:
        """Adds a warning (a CamelCase reason, a message without secrets)."""
        self.warnings.append(types_pb2.Warning(reason=reason, message=message))
        return self


def default_load_balancer_name(cluster_name: str, service_uid: str) -> str:
    """Upstream's default: ``"a"`` + the uid without dashes, at most 32
    characters. It ignores the cluster: prefer
    :func:`cluster_scoped_load_balancer_name`."""
    del cluster_name
    return ("a" + service_uid.replace("-", ""))[:32]


def cluster_scoped_load_balancer_name(cluster_name: str, service_uid: str) -> str:
    """A name two clusters never share: the cluster name (sanitised, at most
    20 characters) + ``-`` + the uid without dashes, at most 63 characters.
    The same names as the Rust SDK's."""
    cluster = "".join(c.lower() if c.isascii() and c.isalnum() else "-" for c in cluster_name[:20])
    return f"{cluster}-{service_uid.replace('-', '')}"[:63]


# The methods below are typed as returning T | Awaitable[T]: either style works.


class Identity(ABC):
    """Required: who the provider is, its annotation schema, readiness."""

    @abstractmethod
    def info(self) -> ProviderInfo:
        """Who the provider is. Called once, when the :class:`ProviderServer`
        is built: the contract fixes the answer per ``vendor_version``."""

    def annotation_schema(self) -> identity_pb2.AnnotationSchema | None:
        """The Service annotations the provider understands (prefixes it
        owns, keys it reads), so the controller can warn about typos.
        Called once, with :meth:`info`."""
        return None

    def probe(self, ctx: CallContext) -> Readiness | Awaitable[Readiness]:
        """Cheap readiness check, called often. A cloud outage is
        ``Readiness.not_ready(...)``, never an error."""
        return Readiness.ready()


#: What :meth:`Instances.batch_instances` answers for one query.
BatchAnswer = (
    Existence
    | bool
    | ShutdownState
    | _instances_pb2.InstanceMetadata
    | _instances_pb2.InstanceMetadataResponse
    | ProviderError
)


class Instances(ABC):
    """``InstancesService`` (InstancesV2 semantics). Prefer
    ``node.provider_id``; fall back to the name, labels or annotations when
    it is empty. A Node whose providerID has a scheme the provider does not
    own (``ProviderInfo.provider_id_scheme`` and ``also_owns``) never
    reaches these methods: the SDK
    answers INVALID_ARGUMENT for it, so NOT_EXISTS is only ever said about
    the provider's own instances."""

    @abstractmethod
    def instance_exists(
        self, ctx: CallContext, node: types_pb2.NodeRef
    ) -> Existence | bool | Awaitable[Existence | bool]:
        """``Existence`` (or True/False). Never an error for absence."""

    @abstractmethod
    def instance_shutdown(
        self, ctx: CallContext, node: types_pb2.NodeRef
    ) -> ShutdownState | Awaitable[ShutdownState]:
        """An unknown instance raises ``ProviderError.instance_not_found``."""

    @abstractmethod
    def instance_metadata(
        self, ctx: CallContext, node: types_pb2.NodeRef
    ) -> _instances_pb2.InstanceMetadata | Awaitable[_instances_pb2.InstanceMetadata]:
        """An unknown instance raises ``ProviderError.instance_not_found``."""

    def batch_instances(
        self, ctx: CallContext, queries: Sequence[_instances_pb2.InstanceQuery]
    ) -> Mapping[str, BatchAnswer] | Awaitable[Mapping[str, BatchAnswer]]:
        """OPTIONAL (contract 1.4.0): answers many queries at once, for a
        cloud whose API answers for many instances in one call. Without an
        override the SDK answers ``BatchInstances`` by calling the three
        methods above for each query, 16 at once.

        Each query has a ``key``, a ``node`` (checked as for the single
        methods: a Node of another provider's scheme never arrives here) and
        a ``question`` (``INSTANCE_QUESTION_EXISTENCE``, ``_SHUTDOWN`` or
        ``_METADATA``). Answer a mapping from each key to what the single
        method would return (``Existence`` or a bool, ``ShutdownState``,
        ``InstanceMetadata`` or, with warnings about the Node, an
        ``InstanceMetadataResponse``) or the ``ProviderError`` it would
        raise; the SDK checks each answer as the single call's, and a key
        without a valid answer gets INTERNAL. Raise only when no query could
        be answered (the cloud unreachable or throttling): the whole call
        fails with that error."""
        raise NotImplementedError


class LoadBalancers(ABC):
    """``LoadBalancerService``. The idempotency key of every mutation is
    ``(cluster_name, service.uid)``. Overriding :meth:`list_load_balancers`
    advertises ``CAPABILITY_LIST_LOAD_BALANCERS``."""

    @abstractmethod
    def get_load_balancer(
        self, ctx: CallContext, cluster_name: str, service: types_pb2.Service
    ) -> types_pb2.LoadBalancerStatus | Awaitable[types_pb2.LoadBalancerStatus | None] | None:
        """The status, or None when no load balancer exists."""

    def get_load_balancer_name(
        self, ctx: CallContext, cluster_name: str, service: types_pb2.Service
    ) -> str | Awaitable[str]:
        """A pure function of cluster name, namespace, name, uid and
        annotations. The default is :func:`cluster_scoped_load_balancer_name`."""
        return cluster_scoped_load_balancer_name(cluster_name, service.uid)

    @abstractmethod
    def ensure_load_balancer(
        self,
        ctx: CallContext,
        cluster_name: str,
        service: types_pb2.Service,
        nodes: list[types_pb2.NodeRef],
    ) -> (
        types_pb2.LoadBalancerStatus | LbAnswer | Awaitable[types_pb2.LoadBalancerStatus | LbAnswer]
    ):
        """Desired state: returns the status (or an :class:`LbAnswer`)."""

    @abstractmethod
    def update_load_balancer(
        self,
        ctx: CallContext,
        cluster_name: str,
        service: types_pb2.Service,
        nodes: list[types_pb2.NodeRef],
    ) -> LbAnswer | Awaitable[LbAnswer | None] | None:
        """Updates only the backends; None means done. Never creates: when
        no load balancer exists, raise ``ProviderError.not_found``."""

    @abstractmethod
    def ensure_load_balancer_deleted(
        self, ctx: CallContext, cluster_name: str, service: types_pb2.Service
    ) -> Iterable[types_pb2.Warning] | Awaitable[Iterable[types_pb2.Warning] | None] | None:
        """Succeeds when nothing exists. Returns warnings, or None."""

    def list_load_balancers(
        self, ctx: CallContext, cluster_name: str
    ) -> (
        Iterable[loadbalancer_pb2.LoadBalancerSummary]
        | Awaitable[Iterable[loadbalancer_pb2.LoadBalancerSummary]]
    ):
        """Every load balancer created for ``cluster_name``; the SDK
        paginates. Not overriding it means listing is not supported."""
        raise NotImplementedError("ListLoadBalancers")


class Routes(ABC):
    """``RoutesService``. The idempotency key is ``(cluster_name,
    destination_cidr)``."""

    #: Whether routes use ``target_node_addresses``
    #: (``CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES``). Contract 1.1.0 then
    #: asks that ``list_routes`` return each route with the addresses it was
    #: created with, and that ``create_route`` for a CIDR already routed to
    #: the same node update the route in place.
    uses_target_node_addresses: bool = False

    @abstractmethod
    def list_routes(
        self, ctx: CallContext, cluster_name: str
    ) -> Iterable[routes_pb2.Route] | Awaitable[Iterable[routes_pb2.Route]]:
        """Every route of ``cluster_name``; the SDK paginates."""

    @abstractmethod
    def create_route(
        self, ctx: CallContext, cluster_name: str, name_hint: str, route: routes_pb2.Route
    ) -> routes_pb2.Route | Awaitable[routes_pb2.Route | None] | None:
        """Succeeds when an identical route exists; raises
        ``ProviderError.conflicting_resource`` when the destination is routed
        elsewhere. Returns the route as created, or None."""

    @abstractmethod
    def delete_route(
        self, ctx: CallContext, cluster_name: str, route: routes_pb2.Route
    ) -> Awaitable[None] | None:
        """Succeeds when the route does not exist."""


class Zones(ABC):
    """``ZonesService`` (optional, legacy)."""

    @abstractmethod
    def zone_by_provider_id(
        self, ctx: CallContext, provider_id: str
    ) -> zones_pb2.Zone | Awaitable[zones_pb2.Zone]: ...

    @abstractmethod
    def zone_by_node_name(
        self, ctx: CallContext, node_name: str
    ) -> zones_pb2.Zone | Awaitable[zones_pb2.Zone]: ...


class Volumes(ABC):
    """``VolumesService`` (optional): labels for PersistentVolumes
    provisioned outside CSI."""

    @abstractmethod
    def get_volume_labels(
        self, ctx: CallContext, volume: volumes_pb2.Volume
    ) -> Mapping[str, str] | Awaitable[Mapping[str, str]]:
        """Empty for a volume the provider does not know."""


class Clusters(ABC):
    """``ClustersService`` (optional, diagnostics)."""

    @abstractmethod
    def list_clusters(self, ctx: CallContext) -> Iterable[str] | Awaitable[Iterable[str]]: ...

    @abstractmethod
    def master(self, ctx: CallContext, cluster_name: str) -> str | Awaitable[str]:
        """The control plane's address; a cluster :meth:`list_clusters` does
        not list raises ``ProviderError.not_found``."""
