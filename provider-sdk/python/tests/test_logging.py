"""Serving configures logging (stderr, ``CCMRS_LOG_LEVEL`` or the
``log_level`` parameter) unless the provider configured it itself. Each
case runs a provider as its own process, as an operator runs one: logging
is process-wide, and pytest's own handlers would hide the difference."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import grpc
import pytest
from conftest import channel

from ccmrs.cloudprovider.v1 import clusters_pb2_grpc
from ccmrs_provider import REQUEST_ID_METADATA, pb, socket_path

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"

PROVIDER = """
import logging
import sys

from ccmrs_provider import Clusters, Identity, ProviderInfo, ProviderServer


class Cloud(Identity, Clusters):
    def info(self):
        return ProviderInfo(name="logs", vendor_version="0.1.0", provider_id_scheme="logs")

    def list_clusters(self, ctx):
        raise RuntimeError("the cloud's API fell over")

    def master(self, ctx, cluster_name):
        return "10.0.0.1"


endpoint, configured, level = sys.argv[1:4]
if configured == "provider":
    logging.basicConfig(format="MINE %(levelname)s %(name)s %(message)s", level=logging.INFO)
kwargs = {} if level == "-" else {"log_level": level}
cloud = Cloud()
ProviderServer(cloud, **kwargs).with_clusters(cloud).serve_until_signal(endpoint)
"""

# The SDK's own lines: UTC time with milliseconds, level, logger, message.
SDK_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) \S+: ")


def run_provider(
    sock_dir: str, configured: str, *, env_level: str | None = None, level: str = "-"
) -> tuple[int, str]:
    """Starts the provider, makes one failing call (request id
    ``req-logs-1``), stops it with SIGTERM; returns its exit code and
    stderr."""
    script = pathlib.Path(sock_dir) / "provider.py"
    script.write_text(PROVIDER)
    endpoint = f"unix://{sock_dir}/provider.sock"
    env = {k: v for k, v in os.environ.items() if k != "CCMRS_LOG_LEVEL"}
    env["PYTHONPATH"] = str(SRC)
    if env_level is not None:
        env["CCMRS_LOG_LEVEL"] = env_level
    proc = subprocess.Popen(
        [sys.executable, str(script), endpoint, configured, level],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(socket_path(endpoint)):
            if proc.poll() is not None:
                return proc.wait(), proc.communicate(timeout=10)[1]
            assert time.monotonic() < deadline, "the provider never opened its socket"
            time.sleep(0.05)
        with channel(endpoint) as c:
            with pytest.raises(grpc.RpcError) as e:
                clusters_pb2_grpc.ClustersServiceStub(c).ListClusters(
                    pb.ListClustersRequest(),
                    metadata=[(REQUEST_ID_METADATA, "req-logs-1")],
                    timeout=10,
                )
            assert e.value.code() == grpc.StatusCode.INTERNAL
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=40)
        return proc.returncode, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_provider_that_configured_no_logging_logs_to_stderr(sock_dir: str) -> None:
    rc, err = run_provider(sock_dir, "nothing")
    assert rc == 0, err
    lines = err.splitlines()
    serving = [line for line in lines if "serving on" in line]
    assert len(serving) == 1, err
    assert SDK_LINE.match(serving[0]), serving[0]
    assert " INFO ccmrs_provider: provider logs 0.1.0 serving on " in serving[0]
    # A provider's exception: the call's method and request id on the line,
    # the traceback (which only the log has) after it.
    failed = [line for line in lines if "provider raised RuntimeError" in line]
    assert len(failed) == 1, err
    assert SDK_LINE.match(failed[0]), failed[0]
    assert " ERROR ccmrs_provider.call: " in failed[0]
    assert "method=ListClusters request_id=req-logs-1" in failed[0]
    assert "RuntimeError: the cloud's API fell over" in err
    assert any(SDK_LINE.match(line) and "provider stopped" in line for line in lines), err
    # INFO by default: the per-call DEBUG lines are not shown.
    assert not any(" DEBUG " in line for line in lines), err


@pytest.mark.parametrize(
    ("env_level", "level", "info", "debug"),
    [
        ("WARNING", "-", False, False),
        ("debug", "-", True, True),
        (None, "DEBUG", True, True),
        (None, "WARNING", False, False),
        # The operator's variable wins over the provider's default.
        ("WARNING", "DEBUG", False, False),
        ("DEBUG", "WARNING", True, True),
    ],
)
def test_the_level_comes_from_the_environment_then_the_parameter(
    sock_dir: str, env_level: str | None, level: str, info: bool, debug: bool
) -> None:
    rc, err = run_provider(sock_dir, "nothing", env_level=env_level, level=level)
    assert rc == 0, err
    assert any("serving on" in line for line in err.splitlines()) == info, err
    call_failed = "ListClusters (request id req-logs-1) failed: code INTERNAL"
    assert any(" DEBUG " in line and call_failed in line for line in err.splitlines()) == debug
    # ERROR is shown at every level tested.
    assert "provider raised RuntimeError" in err


@pytest.mark.parametrize("env_level", [None, "DEBUG"])
def test_a_provider_that_configured_logging_keeps_it(sock_dir: str, env_level: str | None) -> None:
    rc, err = run_provider(sock_dir, "provider", env_level=env_level, level="DEBUG")
    assert rc == 0, err
    lines = err.splitlines()
    # Its format, its level, and each record once: no handler of the SDK's.
    assert not any(SDK_LINE.match(line) for line in lines), err
    assert lines.count("MINE INFO ccmrs_provider provider stopped") == 1, err
    assert sum("serving on" in line for line in lines) == 1, err
    assert sum(line.startswith("MINE ERROR ccmrs_provider.call provider raised") for line in lines)
    assert not any("DEBUG" in line for line in lines), err


def test_a_bad_level_is_refused_at_start(sock_dir: str) -> None:
    rc, err = run_provider(sock_dir, "nothing", env_level="LOUD")
    assert rc != 0
    assert "CCMRS_LOG_LEVEL='LOUD' is not a log level" in err, err
    assert not os.path.exists(f"{sock_dir}/provider.sock")
