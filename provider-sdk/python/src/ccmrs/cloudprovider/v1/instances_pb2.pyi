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
INSTANCE_EXISTENCE_UNSPECIFIED: InstanceExistence
INSTANCE_EXISTENCE_EXISTS: InstanceExistence
INSTANCE_EXISTENCE_NOT_EXISTS: InstanceExistence
INSTANCE_SHUTDOWN_STATE_UNSPECIFIED: InstanceShutdownState
INSTANCE_SHUTDOWN_STATE_RUNNING: InstanceShutdownState
INSTANCE_SHUTDOWN_STATE_SHUT_DOWN: InstanceShutdownState

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
