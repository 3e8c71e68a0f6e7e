"""The contract's errors (proto/ccmrs/cloudprovider/v1/errors.proto).

A provider raises :class:`ProviderError`, built with one of its
constructors (``ProviderError.instance_not_found("...")``); the SDK turns
it into the gRPC status the contract prescribes: the code, and in the
``grpc-status-details-bin`` trailer a ``google.rpc.Status`` whose details
carry a ``google.rpc.ErrorInfo`` (domain ``ccmrs.cloudprovider.v1``, reason
the ``ErrorReason`` name without ``ERROR_REASON_``), plus ``RetryInfo``,
``BadRequest``, ``ResourceInfo`` or ``QuotaFailure`` where the reason calls
for them. The ``google.rpc`` messages come from googleapis-common-protos.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Mapping

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from ccmrs.cloudprovider.v1 import errors_pb2, instances_pb2

from .fencing import FencingToken

#: ``ErrorInfo.domain`` of every error of the contract.
ERROR_DOMAIN = "ccmrs.cloudprovider.v1"
#: The longest error message or field-violation text the SDK sends: they
#: travel in HTTP/2 trailers, which peers limit.
MAX_ERROR_TEXT_BYTES = 4096

_Delay = float | datetime.timedelta


class Reason:
    """The wire names of ``ErrorReason`` (the enum name without ``ERROR_REASON_``)."""

    INSTANCE_NOT_FOUND = "INSTANCE_NOT_FOUND"
    RETRY_AFTER = "RETRY_AFTER"
    INVALID_SERVICE_SPEC = "INVALID_SERVICE_SPEC"
    INVALID_ANNOTATION = "INVALID_ANNOTATION"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    CONFLICTING_RESOURCE = "CONFLICTING_RESOURCE"
    OPERATION_PENDING = "OPERATION_PENDING"
    CLOUD_UNAVAILABLE = "CLOUD_UNAVAILABLE"
    CREDENTIALS_INVALID = "CREDENTIALS_INVALID"
    INVALID_REQUEST = "INVALID_REQUEST"
    NOT_LEADER = "NOT_LEADER"
    NODE_SET_UNKNOWN = "NODE_SET_UNKNOWN"


#: The reasons the contract allows with either of two codes (the first is
#: the constructor's default).
_CODES_OF = {
    Reason.CONFLICTING_RESOURCE: (
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.FAILED_PRECONDITION,
    ),
    Reason.CREDENTIALS_INVALID: (
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    ),
}


def reason_name(value: int) -> str:
    """The wire name of an ``ErrorReason`` value: ``INSTANCE_NOT_FOUND`` for 1."""
    return errors_pb2.ErrorReason.Name(value).removeprefix("ERROR_REASON_")


def _known_reason(name: str) -> bool:
    try:
        return errors_pb2.ErrorReason.Value("ERROR_REASON_" + name) != 0
    except ValueError:
        return False


def bounded(text: str) -> str:
    """``text`` cut at a character boundary to at most
    :data:`MAX_ERROR_TEXT_BYTES` UTF-8 bytes, saying so when cut."""
    raw = text.encode()
    if len(raw) <= MAX_ERROR_TEXT_BYTES:
        return text
    suffix = f"... ({len(raw)} bytes, cut)"
    head = raw[: MAX_ERROR_TEXT_BYTES - len(suffix.encode())]
    return head.decode(errors="ignore") + suffix


def _seconds(delay: _Delay) -> float:
    if isinstance(delay, datetime.timedelta):
        delay = delay.total_seconds()
    if delay < 0:
        raise ValueError(f"a retry delay cannot be negative, got {delay}")
    return float(delay)


class ProviderError(Exception):
    """An error of the provider contract. Build it with the constructors."""

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: str | None,
        message: str,
        *,
        retry_after: _Delay | None = None,
        field_violations: Iterable[tuple[str, str]] = (),
        newest_leader: FencingToken | None = None,
        resource: tuple[str, str] | None = None,
        quota_violations: Iterable[tuple[str, str]] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after: float | None = None if retry_after is None else _seconds(retry_after)
        self.field_violations: list[tuple[str, str]] = list(field_violations)
        self.newest_leader = newest_leader
        self.resource = resource
        self.quota_violations: list[tuple[str, str]] = list(quota_violations)

    def __str__(self) -> str:
        return self.message or self.code.name

    def __repr__(self) -> str:
        return f"ProviderError({self.code.name}, {self.reason!r}, {self.message!r})"

    # ---- constructors, one per reason ----

    @classmethod
    def _bad_field(
        cls, reason: str, field: str, description: str, *, message: str | None = None
    ) -> ProviderError:
        """INVALID_ARGUMENT with a ``BadRequest`` naming ``field``."""
        return cls(
            grpc.StatusCode.INVALID_ARGUMENT,
            reason,
            f"{field}: {description}" if message is None else message,
            field_violations=[(field, description)],
        )

    @classmethod
    def _one_of(cls, reason: str, code: grpc.StatusCode, message: str) -> ProviderError:
        """``reason`` with ``code``, one of the codes the contract allows
        for it."""
        allowed = _CODES_OF[reason]
        if code not in allowed:
            names = " or ".join(c.name for c in allowed)
            raise ValueError(f"the contract allows code {names} here, not {code.name}")
        return cls(code, reason, message)

    @classmethod
    def instance_not_found(
        cls, message: str, *, resource_type: str = "", resource_name: str = ""
    ) -> ProviderError:
        """The node's instance does not exist (NOT_FOUND). ``resource_type``
        and ``resource_name`` add the OPTIONAL ``ResourceInfo``."""
        resource = (resource_type, resource_name) if resource_type or resource_name else None
        return cls(grpc.StatusCode.NOT_FOUND, Reason.INSTANCE_NOT_FOUND, message, resource=resource)

    @classmethod
    def retry_after(cls, message: str, delay: _Delay) -> ProviderError:
        """Not done yet; the controller calls again after exactly ``delay``
        seconds (UNAVAILABLE with ``RetryInfo``)."""
        return cls(grpc.StatusCode.UNAVAILABLE, Reason.RETRY_AFTER, message, retry_after=delay)

    @classmethod
    def invalid_service_spec(cls, field: str, description: str) -> ProviderError:
        """The Service cannot be realised; ``field`` is a path such as
        ``spec.ports[0].protocol`` (INVALID_ARGUMENT with ``BadRequest``)."""
        return cls._bad_field(Reason.INVALID_SERVICE_SPEC, field, description)

    @classmethod
    def invalid_annotation(cls, key: str, description: str) -> ProviderError:
        """An annotation has a value the provider cannot use (INVALID_ARGUMENT,
        ``BadRequest`` field ``metadata.annotations[<key>]``)."""
        return cls._bad_field(
            Reason.INVALID_ANNOTATION,
            f"metadata.annotations[{key}]",
            description,
            message=f"annotation {key}: {description}",
        )

    @classmethod
    def quota_exceeded(
        cls, message: str, *, violations: Iterable[tuple[str, str]] = ()
    ) -> ProviderError:
        """A cloud quota was hit (RESOURCE_EXHAUSTED); ``violations`` are
        (subject, description) pairs for the OPTIONAL ``QuotaFailure``."""
        return cls(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            Reason.QUOTA_EXCEEDED,
            message,
            quota_violations=violations,
        )

    @classmethod
    def conflicting_resource(
        cls, message: str, *, code: grpc.StatusCode = grpc.StatusCode.ALREADY_EXISTS
    ) -> ProviderError:
        """A cloud resource exists and belongs to something else
        (ALREADY_EXISTS, or FAILED_PRECONDITION)."""
        return cls._one_of(Reason.CONFLICTING_RESOURCE, code, message)

    @classmethod
    def operation_pending(cls, message: str) -> ProviderError:
        """Another operation on the same key is in progress (ABORTED)."""
        return cls(grpc.StatusCode.ABORTED, Reason.OPERATION_PENDING, message)

    @classmethod
    def cloud_unavailable(cls, message: str, retry_after: _Delay | None = None) -> ProviderError:
        """The cloud API is unreachable or throttling (UNAVAILABLE), with an
        optional ``RetryInfo`` hint."""
        return cls(
            grpc.StatusCode.UNAVAILABLE,
            Reason.CLOUD_UNAVAILABLE,
            message,
            retry_after=retry_after,
        )

    @classmethod
    def credentials_invalid(
        cls, message: str, *, code: grpc.StatusCode = grpc.StatusCode.PERMISSION_DENIED
    ) -> ProviderError:
        """The provider's own cloud credentials are unusable
        (PERMISSION_DENIED, or UNAUTHENTICATED)."""
        return cls._one_of(Reason.CREDENTIALS_INVALID, code, message)

    @classmethod
    def invalid_request(cls, field: str, description: str) -> ProviderError:
        """The request breaks the contract; ``field`` names the offending
        field (INVALID_ARGUMENT with ``BadRequest``)."""
        return cls._bad_field(Reason.INVALID_REQUEST, field, description)

    @classmethod
    def not_leader(cls, newest: FencingToken) -> ProviderError:
        """A mutation from a deposed leader (FAILED_PRECONDITION): ``newest``
        is the newest fencing token seen for the cluster, sent back in the
        ``ErrorInfo`` metadata ``term`` and ``holder``. The write must not
        have been applied."""
        return cls(
            grpc.StatusCode.FAILED_PRECONDITION,
            Reason.NOT_LEADER,
            f"refused: a newer leader has written (term {newest.term}, holder {newest.holder!r})",
            newest_leader=newest,
        )

    @classmethod
    def node_set_unknown(cls, node_set_id: str) -> ProviderError:
        """A load balancer call named a node set this provider does not hold
        (FAILED_PRECONDITION): the controller puts the set again and repeats
        the call. Only for providers that advertise CAPABILITY_NODE_SETS."""
        return cls(
            grpc.StatusCode.FAILED_PRECONDITION,
            Reason.NODE_SET_UNKNOWN,
            f"node set {node_set_id!r} is not held by this provider; put it with PutNodeSet",
        )

    @classmethod
    def not_found(cls, message: str) -> ProviderError:
        """The resource the call operates on does not exist (NOT_FOUND, no
        reason): UpdateLoadBalancer of a load balancer never ensured or
        deleted out of band, Master of a cluster ListClusters does not list.
        A missing instance is :meth:`instance_not_found` instead."""
        return cls(grpc.StatusCode.NOT_FOUND, None, message)

    @classmethod
    def internal(cls, message: str) -> ProviderError:
        """A provider bug or an unexpected cloud answer (INTERNAL, no reason)."""
        return cls(grpc.StatusCode.INTERNAL, None, message)

    @classmethod
    def unimplemented(cls, message: str) -> ProviderError:
        """The method is not implemented (UNIMPLEMENTED, no reason)."""
        return cls(grpc.StatusCode.UNIMPLEMENTED, None, message)

    @classmethod
    def cancelled(cls, message: str = "the caller gave up") -> ProviderError:
        """The caller cancelled the call or its deadline passed (CANCELLED)."""
        return cls(grpc.StatusCode.CANCELLED, None, message)

    # ---- wire form ----

    def to_rpc_status(self) -> status_pb2.Status:
        """The ``google.rpc.Status`` the contract prescribes, texts bounded."""
        status = status_pb2.Status(code=self.code.value[0], message=bounded(self.message))
        if self.reason is not None:
            metadata: dict[str, str] = {}
            if self.newest_leader is not None:
                metadata = {
                    "term": str(self.newest_leader.term),
                    "holder": bounded(self.newest_leader.holder),
                }
            status.details.add().Pack(
                error_details_pb2.ErrorInfo(
                    reason=self.reason, domain=ERROR_DOMAIN, metadata=metadata
                )
            )
        if self.retry_after is not None:
            delay = duration_pb2.Duration()
            delay.FromNanoseconds(round(self.retry_after * 1e9))
            status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        if self.field_violations:
            status.details.add().Pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=bounded(f), description=bounded(d)
                        )
                        for f, d in self.field_violations
                    ]
                )
            )
        if self.resource is not None:
            status.details.add().Pack(
                error_details_pb2.ResourceInfo(
                    resource_type=bounded(self.resource[0]),
                    resource_name=bounded(self.resource[1]),
                )
            )
        if self.quota_violations:
            status.details.add().Pack(
                error_details_pb2.QuotaFailure(
                    violations=[
                        error_details_pb2.QuotaFailure.Violation(
                            subject=bounded(s), description=bounded(d)
                        )
                        for s, d in self.quota_violations
                    ]
                )
            )
        return status

    def to_query_error(self) -> instances_pb2.QueryError:
        """The ``QueryError`` of a BatchInstances query whose single call
        would fail with this error (contract 1.4.0): the same code, reason,
        message, first field and retry delay (in milliseconds, rounded up)."""
        error = instances_pb2.QueryError(
            code=self.code.value[0],
            reason=(
                errors_pb2.ErrorReason.Value("ERROR_REASON_" + self.reason)
                if self.reason and _known_reason(self.reason)
                else 0
            ),
            message=bounded(self.message),
        )
        if self.field_violations:
            error.field = bounded(self.field_violations[0][0])
        if self.retry_after is not None and self.retry_after > 0:
            error.retry_delay_ms = min(math.ceil(self.retry_after * 1000), 2**32 - 1)
        return error

    def to_grpc_status(self) -> grpc.Status:
        """The status as grpc wants it for ``context.abort_with_status``."""
        return rpc_status.to_status(self.to_rpc_status())

    @classmethod
    def from_rpc_status(cls, status: status_pb2.Status) -> ProviderError:
        """Reads a ``google.rpc.Status`` back. Unknown reasons and foreign
        domains keep only the code, so callers fall back to it."""
        code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
        reason: str | None = None
        metadata: Mapping[str, str] = {}
        retry_after = None
        violations: list[tuple[str, str]] = []
        resource = None
        quota: list[tuple[str, str]] = []
        for any_detail in status.details:
            if any_detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                any_detail.Unpack(info)
                if info.domain == ERROR_DOMAIN and _known_reason(info.reason):
                    reason, metadata = info.reason, dict(info.metadata)
            elif any_detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                any_detail.Unpack(retry)
                retry_after = retry.retry_delay.ToNanoseconds() / 1e9
            elif any_detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                any_detail.Unpack(bad)
                violations = [(v.field, v.description) for v in bad.field_violations]
            elif any_detail.Is(error_details_pb2.ResourceInfo.DESCRIPTOR):
                info_r = error_details_pb2.ResourceInfo()
                any_detail.Unpack(info_r)
                resource = (info_r.resource_type, info_r.resource_name)
            elif any_detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
                qf = error_details_pb2.QuotaFailure()
                any_detail.Unpack(qf)
                quota = [(v.subject, v.description) for v in qf.violations]
        newest = None
        if reason == Reason.NOT_LEADER and "term" in metadata and "holder" in metadata:
            try:
                newest = FencingToken.parse(f"{metadata['term']}:{metadata['holder']}")
            except ValueError:
                newest = None
        return cls(
            code,
            reason,
            bounded(status.message),
            retry_after=retry_after,
            field_violations=violations,
            newest_leader=newest,
            resource=resource,
            quota_violations=quota,
        )

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> ProviderError:
        """Reads the error a (sync) grpc stub raised back into a ProviderError."""
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
        if status is None:
            code = error.code()  # type: ignore[attr-defined]
            return cls(code, None, bounded(error.details() or ""))  # type: ignore[attr-defined]
        return cls.from_rpc_status(status)


_CODES = {c.value[0]: c for c in grpc.StatusCode}
