"""Write a ccm-rs cloud provider in Python.

A provider subclasses plain abstract classes, one per contract service
(:class:`Identity` is required; :class:`Instances`, :class:`LoadBalancers`,
:class:`Routes`, :class:`Zones`, :class:`Volumes` and :class:`Clusters` are
opt-in) and hands them to :class:`ProviderServer`. The SDK owns the
plumbing: the Unix socket (stale socket cleanup, mode 0600 by default),
capabilities derived from what is implemented, Identity +
``grpc.health.v1`` + reflection on the same socket, request validation
naming the field, validation of the provider's answers, pagination,
deadline and cancellation (:class:`CallContext`), fencing tokens
(:class:`FencingToken`, :class:`Fence`), 16 MiB message limits both ways,
errors with exactly the contract's codes and reasons
(:class:`ProviderError`), graceful shutdown on SIGTERM/SIGINT, and a
stderr log handler unless the provider configured logging itself
(:func:`configure_logging`).

The contract's messages are in :mod:`ccmrs_provider.pb`.
"""

from . import pb
from .calls import REQUEST_ID_METADATA
from .endpoint import DEFAULT_ENDPOINT, EndpointError, socket_path
from .errors import ERROR_DOMAIN, MAX_ERROR_TEXT_BYTES, ProviderError, Reason
from .fencing import FENCING_TOKEN_METADATA, Fence, FencingToken
from .logs import LOG_LEVEL_ENV, configure_logging
from .paginate import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
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
    cluster_scoped_load_balancer_name,
    default_load_balancer_name,
)
from .server import CONTRACT_VERSION, MAX_MESSAGE_BYTES, ProviderServer, RunningServer
from .validate import Violation

__all__ = [
    "CONTRACT_VERSION",
    "DEFAULT_ENDPOINT",
    "DEFAULT_PAGE_SIZE",
    "ERROR_DOMAIN",
    "FENCING_TOKEN_METADATA",
    "LOG_LEVEL_ENV",
    "MAX_ERROR_TEXT_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_PAGE_SIZE",
    "REQUEST_ID_METADATA",
    "CallContext",
    "Clusters",
    "EndpointError",
    "Existence",
    "Fence",
    "FencingToken",
    "Identity",
    "Instances",
    "LbAnswer",
    "LoadBalancers",
    "ProviderError",
    "ProviderInfo",
    "ProviderServer",
    "Readiness",
    "Reason",
    "Routes",
    "RunningServer",
    "ShutdownState",
    "Violation",
    "Volumes",
    "Zones",
    "cluster_scoped_load_balancer_name",
    "configure_logging",
    "default_load_balancer_name",
    "pb",
    "socket_path",
]
