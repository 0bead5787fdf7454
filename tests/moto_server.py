"""A real S3-compatible server for the S3 tests: moto's server mode on 127.0.0.1, with dummy
credentials and no lookups of real ones, stopped afterwards (tests/test_remote.py,
tests/test_manager.py and tests/rllib)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def moto_endpoint(*, endpoint_in_env: bool) -> Iterator[str]:
    """Yield the server's URL. With ``endpoint_in_env``, ``AWS_ENDPOINT_URL`` names it (for
    clients configured from the environment alone); otherwise it is removed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto server did not start on {endpoint}")
                time.sleep(0.05)
        with pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_ACCESS_KEY_ID", "testing")
            env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            env.setenv("AWS_DEFAULT_REGION", "us-east-1")
            env.setenv("AWS_EC2_METADATA_DISABLED", "true")
            env.delenv("AWS_PROFILE", raising=False)
            if endpoint_in_env:
                env.setenv("AWS_ENDPOINT_URL", endpoint)
            else:
                env.delenv("AWS_ENDPOINT_URL", raising=False)
            yield endpoint
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
