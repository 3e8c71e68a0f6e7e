"""Shared fixtures: short socket paths (a Unix socket path is limited to
about 100 bytes, which pytest's tmp_path can exceed) and a channel factory
with the contract's message limits."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import grpc
import pytest

from ccmrs_provider import MAX_MESSAGE_BYTES


@pytest.fixture
def sock_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="ccm-py-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def endpoint(sock_dir: str) -> str:
    return f"unix://{sock_dir}/provider.sock"


def channel(endpoint: str) -> grpc.Channel:
    """A client channel to ``unix://`` ``endpoint`` that, like the
    controller, accepts 16 MiB answers."""
    return grpc.insecure_channel(
        endpoint.replace("unix://", "unix:", 1),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
