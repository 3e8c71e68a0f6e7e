"""The README's "a provider in N lines" is examples/tiny_provider.py,
verbatim; this runs it as a process and stops it with a signal."""

import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import channel

from ccmrs.cloudprovider.v1 import identity_pb2_grpc, instances_pb2_grpc
from ccmrs_provider import ProviderError, Reason, pb, socket_path

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tiny_provider.py"


def test_the_readme_shows_the_example_verbatim_with_its_line_count() -> None:
    readme = (ROOT / "README.md").read_text()
    code = EXAMPLE.read_text()
    assert f"```python\n{code}```" in readme
    lines = len(code.splitlines())
    assert f"a provider in {lines} lines" in readme.lower()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_example_serves_and_stops_on_a_signal(endpoint: str, sig: signal.Signals) -> None:
    path = socket_path(endpoint)
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), endpoint], stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(path):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the example never opened its socket"
            time.sleep(0.05)
        with channel(endpoint) as c:
            info = identity_pb2_grpc.IdentityServiceStub(c).GetProviderInfo(
                pb.GetProviderInfoRequest(), timeout=10
            )
            assert info.name == "tiny"
            inst = instances_pb2_grpc.InstancesServiceStub(c)
            meta = inst.InstanceMetadata(
                pb.InstanceMetadataRequest(node=pb.NodeRef(name="vm-7")), timeout=10
            )
            assert meta.metadata.provider_id == "tiny://vm-7"
            gone = inst.InstanceExists(
                pb.InstanceExistsRequest(node=pb.NodeRef(name="db-1")), timeout=10
            )
            assert gone.existence == pb.INSTANCE_EXISTENCE_NOT_EXISTS
            try:
                inst.InstanceShutdown(
                    pb.InstanceShutdownRequest(node=pb.NodeRef(name="db-1")), timeout=10
                )
                raise AssertionError("expected NOT_FOUND")
            except Exception as e:  # grpc.RpcError
                assert ProviderError.from_rpc_error(e).reason == Reason.INSTANCE_NOT_FOUND
        proc.send_signal(sig)
        assert proc.wait(timeout=40) == 0
        assert not os.path.exists(path), "the socket outlived the provider"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def test_readme_mentions_only_real_names() -> None:
    """Every ccmrs_provider name the README uses exists."""
    import ccmrs_provider

    readme = (ROOT / "README.md").read_text()
    for name in set(re.findall(r"ccmrs_provider\.(\w+)", readme)):
        assert hasattr(ccmrs_provider, name), name
