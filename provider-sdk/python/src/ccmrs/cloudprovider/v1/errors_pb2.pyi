from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_INSTANCE_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_RETRY_AFTER: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_SERVICE_SPEC: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_ANNOTATION: _ClassVar[ErrorReason]
    ERROR_REASON_QUOTA_EXCEEDED: _ClassVar[ErrorReason]
    ERROR_REASON_CONFLICTING_RESOURCE: _ClassVar[ErrorReason]
    ERROR_REASON_OPERATION_PENDING: _ClassVar[ErrorReason]
    ERROR_REASON_CLOUD_UNAVAILABLE: _ClassVar[ErrorReason]
    ERROR_REASON_CREDENTIALS_INVALID: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_REQUEST: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_LEADER: _ClassVar[ErrorReason]
    ERROR_REASON_NODE_SET_UNKNOWN: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_INSTANCE_NOT_FOUND: ErrorReason
ERROR_REASON_RETRY_AFTER: ErrorReason
ERROR_REASON_INVALID_SERVICE_SPEC: ErrorReason
ERROR_REASON_INVALID_ANNOTATION: ErrorReason
ERROR_REASON_QUOTA_EXCEEDED: ErrorReason
ERROR_REASON_CONFLICTING_RESOURCE: ErrorReason
ERROR_REASON_OPERATION_PENDING: ErrorReason
ERROR_REASON_CLOUD_UNAVAILABLE: ErrorReason
ERROR_REASON_CREDENTIALS_INVALID: ErrorReason
ERROR_REASON_INVALID_REQUEST: ErrorReason
ERROR_REASON_NOT_LEADER: ErrorReason
ERROR_REASON_NODE_SET_UNKNOWN: ErrorReason
