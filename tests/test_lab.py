"""`make lab` starts a JupyterLab on notebooks/ that keeps its token on and binds to 127.0.0.1."""

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(
    Path(sys.prefix).resolve() != (REPO / ".venv").resolve(),
    reason="drives `make lab`, which uses the project's .venv: run under `make test`",
)


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def test_make_lab_serves_the_tour_with_a_token(free_port):
    port, token = free_port(), secrets.token_hex(16)
    lab = subprocess.Popen(
        ["make", "-s", "lab", f"PORT={port}", f"LAB_ARGS=--no-browser --IdentityProvider.token={token}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                status, body = _get(f"{base}/api/contents/00_tour.ipynb?content=0", token)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if lab.poll() is not None:
                    pytest.fail(f"`make lab` exited {lab.returncode}:\n{lab.stdout.read()[-3000:]}")
                if time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not answer within 90 s")
                time.sleep(0.5)
        assert status == 200 and json.loads(body)["name"] == "00_tour.ipynb"
        assert _get(f"{base}/api/contents/00_tour.ipynb?content=0")[0] == 403, "served without the token"
        status, body = _get(f"{base}/api/kernelspecs", token)
        assert status == 200 and "workbench" in json.loads(body)["kernelspecs"]
        assert _get(f"{base}/lab/tree/00_tour.ipynb", token)[0] == 200
        with socket.socket() as probe:  # bound to loopback only: another local address is refused
            other = socket.gethostbyname(socket.gethostname())
            if not other.startswith("127."):
                assert probe.connect_ex((other, port)) != 0
    finally:
        _stop_group(lab)


def _stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the whole process group (make and jupyter), SIGKILL what is left after 20 s."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
