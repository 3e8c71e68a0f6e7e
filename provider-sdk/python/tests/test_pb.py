import importlib

from ccmrs_provider import pb

MODULES = [
    "types",
    "identity",
    "instances",
    "loadbalancer",
    "routes",
    "zones",
    "clusters",
    "volumes",
    "errors",
]


def test_pb_exports_every_message_enum_and_enum_value() -> None:
    for m in MODULES:
        descriptor = importlib.import_module(f"ccmrs.cloudprovider.v1.{m}_pb2").DESCRIPTOR
        for name in descriptor.message_types_by_name:
            assert getattr(pb, name).DESCRIPTOR.full_name == f"ccmrs.cloudprovider.v1.{name}"
        for name, enum in descriptor.enum_types_by_name.items():
            assert hasattr(pb, name)
            for value in enum.values:
                assert getattr(pb, value.name) == value.number
