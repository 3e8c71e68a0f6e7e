"""The README's "a provider in N lines" is examples/tiny_provider.py,
verbatim; this runs it as a process and stops it with a signal."""

import abc
import inspect
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import channel

import ccmrs_provider
from ccmrs.cloudprovider.v1 import identity_pb2_grpc, instances_pb2_grpc
from ccmrs_provider import ProviderError, Reason, pb, provider, socket_path

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


def section(readme: str, heading: str) -> str:
    """The README's text under ``heading`` (a whole line), up to the next
    heading of any level."""
    lines = readme.splitlines()
    assert heading in lines, f"the README has no {heading!r} section"
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("#")), len(lines))
    return "\n".join(lines[start:end])


def call_form(name: str, fn: object) -> str:
    """``name(a, b, *, c)``: how the README writes a signature (no self, no
    defaults)."""
    params = []
    star = False
    for p in inspect.signature(fn).parameters.values():  # type: ignore[arg-type]
        if p.name == "self":
            continue
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not star:
            params.append("*")
            star = True
        params.append(p.name)
    return f"{name}({', '.join(params)})"


SERVICE_CLASSES = [
    c
    for c in vars(provider).values()
    if isinstance(c, type) and issubclass(c, abc.ABC) and c is not abc.ABC
]


def test_every_service_class_is_in_the_readme() -> None:
    """The services are the abstract classes of ccmrs_provider.provider, so
    a new one needs a README section (the test below) before it passes."""
    names = {c.__name__ for c in SERVICE_CLASSES}
    assert {"Identity", "Instances", "LoadBalancers", "Routes", "Zones", "Volumes"} < names


@pytest.mark.parametrize(
    "cls", [*SERVICE_CLASSES, ccmrs_provider.ProviderServer], ids=lambda c: c.__name__
)
def test_the_readme_documents_every_public_member_with_its_signature(cls: type) -> None:
    """Each public method of a class appears in its README section as
    `name(params)`, with the parameters it has now; attributes and
    properties as `name`."""
    text = section((ROOT / "README.md").read_text(), f"### `{cls.__name__}`")
    missing = []
    if cls is ccmrs_provider.ProviderServer:
        form = call_form(cls.__name__, cls.__init__)
        if f"`{form}`" not in text:
            missing.append(form)
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if inspect.isfunction(member):
            form = call_form(name, member)
            # A cell may list several methods: `a(x)`, `b(x)`.
            if not re.search(rf"`{re.escape(form)}`", text):
                missing.append(form)
        elif f"`{name}`" not in text:
            missing.append(name)
    assert not missing, f"README section of {cls.__name__} lacks {missing}"


def test_the_readme_mentions_everything_the_package_exports() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [n for n in ccmrs_provider.__all__ if not re.search(rf"`{n}[`(.]", readme)]
    assert not missing, missing
