"""The SDK installs the way the README says, outside this repository: into a
fresh virtualenv in a temporary directory, from the wheel
``scripts/build_wheel.py`` builds (what ``make release`` ships) and from a
``git+...#subdirectory=provider-sdk/python`` URL, with the working
directory outside the checkout and no PYTHONPATH; a provider written
against the installed package then answers over its socket.

Dependencies come from ``$CCMRS_WHEELHOUSE`` (wheels at the versions of
constraints.txt, which ``hack/python-sdk.sh`` provides), without the
network; without it, from the package index, pinned by constraints.txt."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator

import pytest
from conftest import channel

from ccmrs.cloudprovider.v1 import identity_pb2_grpc
from ccmrs_provider import CONTRACT_VERSION, pb

SDK = pathlib.Path(__file__).resolve().parents[1]
REPO = SDK.parents[1]
CONSTRAINTS = SDK / "constraints.txt"
BUILD_WHEEL = SDK / "scripts" / "build_wheel.py"


def version_in(path: pathlib.Path) -> str:
    """The first ``version = "..."`` line of a pyproject.toml or Cargo.toml
    (the package's, or the workspace's)."""
    found = re.search(r'^version = "([^"]+)"$', path.read_text(), re.MULTILINE)
    assert found, f"no version in {path}"
    return found.group(1)


# A provider as an author outside the repository writes it: it imports only
# the installed package, and says where that package was found.
PROVIDER = """
import sys

import ccmrs_provider
from ccmrs_provider import Identity, ProviderInfo, ProviderServer


class Outside(Identity):
    def info(self):
        return ProviderInfo(name="outside", vendor_version="9.9.9", provider_id_scheme="outside")


print(ccmrs_provider.__file__, flush=True)
ProviderServer(Outside()).serve_until_signal(sys.argv[1])
"""


@pytest.fixture
def outside() -> Iterator[pathlib.Path]:
    """A temporary directory outside the checkout (short: it holds a socket)."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="ccm-py-")).resolve()
    try:
        assert not d.is_relative_to(REPO), f"{d} is inside the checkout {REPO}"
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def clean_env() -> dict[str, str]:
    """The environment without anything that points Python or pip into the
    checkout or into another virtualenv."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_FIND_LINKS", "CCMRS_LOG_LEVEL"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def run(args: list[str], cwd: pathlib.Path, timeout: float = 90) -> str:
    """Runs a command outside the checkout; from the wheelhouse a venv or an
    install takes seconds, so a hang fails well before the lock's limit."""
    done = subprocess.run(
        args, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def build_wheel(out: pathlib.Path, epoch: str | None = None) -> pathlib.Path:
    env = {**os.environ}
    if epoch is not None:
        env["SOURCE_DATE_EPOCH"] = epoch
    done = subprocess.run(
        [sys.executable, str(BUILD_WHEEL), str(out)],
        cwd=out.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return pathlib.Path(done.stdout.strip())


def fresh_venv(where: pathlib.Path, requirement: str) -> pathlib.Path:
    """A new virtualenv under ``where`` with ``requirement`` installed the
    way an author installs it, from ``where`` as the working directory.
    Returns its python."""
    venv = where / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=where)
    python = venv / "bin" / "python"
    source = []
    if os.environ.get("CCMRS_WHEELHOUSE"):
        source = ["--no-index", "--find-links", os.environ["CCMRS_WHEELHOUSE"]]
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    run([*pip, "install", *source, "-c", str(CONSTRAINTS), requirement], cwd=where)
    return python


def serve_and_ask(python: pathlib.Path, where: pathlib.Path) -> None:
    """Runs PROVIDER with ``python`` and asks it GetProviderInfo."""
    script = where / "provider.py"
    script.write_text(PROVIDER)
    endpoint = f"unix://{where}/provider.sock"
    proc = subprocess.Popen(
        [str(python), str(script), endpoint],
        cwd=where,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (where / "provider.sock").exists():
            if proc.poll() is not None:
                raise AssertionError(proc.communicate(timeout=10)[1])
            assert time.monotonic() < deadline, "the provider never opened its socket"
            time.sleep(0.05)
        with channel(endpoint) as c:
            info = identity_pb2_grpc.IdentityServiceStub(c).GetProviderInfo(
                pb.GetProviderInfoRequest(), timeout=10
            )
        assert (info.name, info.vendor_version) == ("outside", "9.9.9")
        assert info.contract_version == CONTRACT_VERSION
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=40)
        assert proc.returncode == 0, err
        # Imported from the fresh virtualenv, not from the checkout.
        imported = pathlib.Path(out.splitlines()[0])
        assert imported.is_relative_to(where / "venv"), imported
        # The SDK's log handler, since this provider configured none.
        assert "INFO ccmrs_provider: provider outside 9.9.9 serving on" in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_the_wheel_installs_and_serves_outside_the_repository(outside: pathlib.Path) -> None:
    wheel = build_wheel(outside / "dist")
    version = version_in(SDK / "pyproject.toml")
    assert wheel.name == f"ccmrs_provider-{version}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    # Self-contained: the generated stubs, their type stubs, py.typed.
    for name in (
        "ccmrs/cloudprovider/v1/identity_pb2.py",
        "ccmrs/cloudprovider/v1/identity_pb2.pyi",
        "ccmrs/cloudprovider/v1/loadbalancer_pb2_grpc.py",
        "ccmrs_provider/server.py",
        "ccmrs_provider/py.typed",
    ):
        assert name in names, name
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    python = fresh_venv(outside, str(wheel))
    serve_and_ask(python, outside)


def test_the_wheel_is_reproducible(outside: pathlib.Path) -> None:
    first = build_wheel(outside / "a", epoch="1700000000")
    second = build_wheel(outside / "b", epoch="1700000000")
    assert first.read_bytes() == second.read_bytes()
    later = build_wheel(outside / "c", epoch="1800000000")
    # The epoch is what differs: the entries' time.
    assert later.read_bytes() != first.read_bytes()
    assert zipfile.ZipFile(later).namelist() == zipfile.ZipFile(first).namelist()


def test_the_git_url_installs_and_serves_outside_the_repository(outside: pathlib.Path) -> None:
    """The README's line, against a repository holding what a commit of this
    checkout would (tracked and new files, as they are now)."""
    listed = run(
        ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "provider-sdk/python"],
        cwd=outside,
    )
    repo = outside / "ccm-rs"
    for rel in listed.splitlines():
        if (REPO / rel).is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / rel, repo / rel)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    run([*git, "init", "-q"], cwd=outside)
    run([*git, "add", "-A"], cwd=outside)
    run([*git, "commit", "-q", "-m", "release"], cwd=outside)
    run([*git, "tag", "v0.0.0-test"], cwd=outside)
    readme = (SDK / "README.md").read_text()
    line = re.search(
        r'pip install "ccmrs-provider @ git\+https://github\.com/ccm-rs/ccm-rs@([^#"]+)#([^"]+)"',
        readme,
    )
    assert line, "the README has no pip install line with the repository's git URL"
    version = version_in(SDK / "pyproject.toml")
    assert line.group(1) == f"v{version}", "the README's line installs another version"
    # pip refuses a git+file URL without a host.
    url = f"git+file://localhost{repo}@v0.0.0-test#{line.group(2)}"
    python = fresh_venv(outside, f"ccmrs-provider @ {url}")
    serve_and_ask(python, outside)


def test_the_sdk_version_is_the_release_version() -> None:
    """``make release`` ships the wheel with the workspace's version."""
    assert version_in(SDK / "pyproject.toml") == version_in(REPO / "Cargo.toml")
