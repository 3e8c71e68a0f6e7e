from ccmrs.cloudprovider.v1 import errors_pb2 as _errors_pb2
from ccmrs.cloudprovider.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InstanceExistence(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INSTANCE_EXISTENCE_UNSPECIFIED: _ClassVar[InstanceExistence]
    INSTANCE_EXISTENCE_EXISTS: _ClassVar[InstanceExistence]
    INSTANCE_EXISTENCE_NOT_EXISTS: _ClassVar[InstanceExistence]

class InstanceShutdownState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INSTANCE_SHUTDOWN_STATE_UNSPECIFIED: _ClassVar[InstanceShutdownState]
    INSTANCE_SHUTDOWN_STATE_RUNNING: _ClassVar[InstanceShutdownState]
    INSTANCE_SHUTDOWN_STATE_SHUT_DOWN: _ClassVar[InstanceShutdownState]

class InstanceQuestion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INSTANCE_QUESTION_UNSPECIFIED: _ClassVar[InstanceQuestion]
    INSTANCE_QUESTION_EXISTENCE: _ClassVar[InstanceQuestion]
    INSTANCE_QUESTION_SHUTDOWN: _ClassVar[InstanceQuestion]
    INSTANCE_QUESTION_METADATA: _ClassVar[InstanceQuestion]
INSTANCE_EXISTENCE_UNSPECIFIED: InstanceExistence
INSTANCE_EXISTENCE_EXISTS: InstanceExistence
INSTANCE_EXISTENCE_NOT_EXISTS: InstanceExistence
INSTANCE_SHUTDOWN_STATE_UNSPECIFIED: InstanceShutdownState
INSTANCE_SHUTDOWN_STATE_RUNNING: InstanceShutdownState
INSTANCE_SHUTDOWN_STATE_SHUT_DOWN: InstanceShutdownState
INSTANCE_QUESTION_UNSPECIFIED: InstanceQuestion
INSTANCE_QUESTION_EXISTENCE: InstanceQuestion
INSTANCE_QUESTION_SHUTDOWN: InstanceQuestion
INSTANCE_QUESTION_METADATA: InstanceQuestion

class InstanceExistsRequest(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _types_pb2.NodeRef
    def __init__(self, node: _Optional[_Union[_types_pb2.NodeRef, _Mapping]] = ...) -> None: ...

class InstanceExistsResponse(_message.Message):
    __slots__ = ("existence",)
    EXISTENCE_FIELD_NUMBER: _ClassVar[int]
    existence: InstanceExistence
    def __init__(self, existence: _Optional[_Union[InstanceExistence, str]] = ...) -> None: ...

class InstanceShutdownRequest(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _types_pb2.NodeRef
    def __init__(self, node: _Optional[_Union[_types_pb2.NodeRef, _Mapping]] = ...) -> None: ...

class InstanceShutdownResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: InstanceShutdownState
    def __init__(self, state: _Optional[_Union[InstanceShutdownState, str]] = ...) -> None: ...

class InstanceMetadataRequest(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _types_pb2.NodeRef
    def __init__(self, node: _Optional[_Union[_types_pb2.NodeRef, _Mapping]] = ...) -> None: ...

class InstanceMetadata(_message.Message):
    __slots__ = ("provider_id", "instance_type", "node_addresses", "zone", "region", "additional_labels")
    class AdditionalLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PROVIDER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    NODE_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_LABELS_FIELD_NUMBER: _ClassVar[int]
    provider_id: str
    instance_type: str
    node_addresses: _containers.RepeatedCompositeFieldContainer[_types_pb2.NodeAddress]
    zone: str
    region: str
    additional_labels: _containers.ScalarMap[str, str]
    def __init__(self, provider_id: _Optional[str] = ..., instance_type: _Optional[str] = ..., node_addresses: _Optional[_Iterable[_Union[_types_pb2.NodeAddress, _Mapping]]] = ..., zone: _Optional[str] = ..., region: _Optional[str] = ..., additional_labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class InstanceMetadataResponse(_message.Message):
    __slots__ = ("metadata", "warnings")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    metadata: InstanceMetadata
    warnings: _containers.RepeatedCompositeFieldContainer[_types_pb2.Warning]
    def __init__(self, metadata: _Optional[_Union[InstanceMetadata, _Mapping]] = ..., warnings: _Optional[_Iterable[_Union[_types_pb2.Warning, _Mapping]]] = ...) -> None: ...

class InstanceQuery(_message.Message):
    __slots__ = ("key", "node", "question")
    KEY_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    key: str
    node: _types_pb2.NodeRef
    question: InstanceQuestion
    def __init__(self, key: _Optional[str] = ..., node: _Optional[_Union[_types_pb2.NodeRef, _Mapping]] = ..., question: _Optional[_Union[InstanceQuestion, str]] = ...) -> None: ...

class BatchInstancesRequest(_message.Message):
    __slots__ = ("queries",)
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    queries: _containers.RepeatedCompositeFieldContainer[InstanceQuery]
    def __init__(self, queries: _Optional[_Iterable[_Union[InstanceQuery, _Mapping]]] = ...) -> None: ...

class QueryError(_message.Message):
    __slots__ = ("code", "reason", "message", "field", "retry_delay_ms")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    code: int
    reason: _errors_pb2.ErrorReason
    message: str
    field: str
    retry_delay_ms: int
    def __init__(self, code: _Optional[int] = ..., reason: _Optional[_Union[_errors_pb2.ErrorReason, str]] = ..., message: _Optional[str] = ..., field: _Optional[str] = ..., retry_delay_ms: _Optional[int] = ...) -> None: ...

class InstanceResult(_message.Message):
    __slots__ = ("key", "existence", "shutdown", "metadata", "error")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EXISTENCE_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    key: str
    existence: InstanceExistsResponse
    shutdown: InstanceShutdownResponse
    metadata: InstanceMetadataResponse
    error: QueryError
    def __init__(self, key: _Optional[str] = ..., existence: _Optional[_Union[InstanceExistsResponse, _Mapping]] = ..., shutdown: _Optional[_Union[InstanceShutdownResponse, _Mapping]] = ..., metadata: _Optional[_Union[InstanceMetadataResponse, _Mapping]] = ..., error: _Optional[_Union[QueryError, _Mapping]] = ...) -> None: ...

class BatchInstancesResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[InstanceResult]
    def __init__(self, results: _Optional[_Iterable[_Union[InstanceResult, _Mapping]]] = ...) -> None: ...
