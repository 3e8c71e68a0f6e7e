import os
import socket
import stat

import grpc
import pytest
from conftest import channel

from ccmrs.cloudprovider.v1 import identity_pb2_grpc
from ccmrs_provider import EndpointError, Identity, ProviderInfo, ProviderServer, pb, socket_path


class Tiny(Identity):
    def info(self):
        return ProviderInfo(name="tiny", vendor_version="0", provider_id_scheme="tiny")


def answers(endpoint: str) -> bool:
    with channel(endpoint) as c:
        stub = identity_pb2_grpc.IdentityServiceStub(c)
        return stub.GetProviderInfo(pb.GetProviderInfoRequest(), timeout=5).name == "tiny"


def test_endpoints() -> None:
    assert socket_path("unix:///run/p.sock") == "/run/p.sock"
    assert socket_path("unix:/run/p.sock") == "/run/p.sock"
    for bad in ["unix://relative.sock", "tcp://127.0.0.1:1", "/run/p.sock"]:
        with pytest.raises(EndpointError):
            socket_path(bad)


def test_socket_is_private_by_default_and_removed_on_stop(endpoint: str) -> None:
    path = socket_path(endpoint)
    with ProviderServer(Tiny()).start(endpoint):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert answers(endpoint)
    assert not os.path.exists(path)


def test_group_mode_on_request(endpoint: str) -> None:
    with ProviderServer(Tiny(), socket_mode=0o660).start(endpoint):
        assert stat.S_IMODE(os.stat(socket_path(endpoint)).st_mode) == 0o660


def test_a_stale_socket_is_replaced(endpoint: str) -> None:
    path = socket_path(endpoint)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)
    dead.close()  # the file stays behind, nobody listens
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    with ProviderServer(Tiny()).start(endpoint):
        assert answers(endpoint)


def test_a_live_socket_is_left_alone(endpoint: str) -> None:
    with ProviderServer(Tiny()).start(endpoint):
        with pytest.raises(EndpointError, match="in use"):
            ProviderServer(Tiny()).start(endpoint)
        assert answers(endpoint)


def test_a_file_that_is_not_a_socket_is_never_removed(endpoint: str) -> None:
    path = socket_path(endpoint)
    with open(path, "w") as f:
        f.write("precious")
    with pytest.raises(EndpointError, match="not a socket"):
        ProviderServer(Tiny()).start(endpoint)
    with open(path) as f:
        assert f.read() == "precious"


def test_a_stopped_server_answers_nothing_and_a_new_one_takes_its_endpoint(
    endpoint: str,
) -> None:
    with ProviderServer(Tiny()).start(endpoint):
        assert answers(endpoint)
    with pytest.raises(grpc.RpcError) as e:
        answers(endpoint)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    # A provider restarted on the same endpoint serves again.
    with ProviderServer(Tiny()).start(endpoint):
        assert answers(endpoint)
    assert not os.path.exists(socket_path(endpoint))
