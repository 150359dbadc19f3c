"""``linattn sweep --scheduler`` at a service that is not Dask (issue 45, finding 5): a web server hung the command
for over ten minutes (the timeout did not cover the handshake) and a service sending other bytes made Dask try to
allocate 3.07 EiB. Now: one line, exit 2, within the timeout."""

from __future__ import annotations

import http.server
import socket
import socketserver
import threading
import time

import pytest

from linattn.cli import main
from linattn.cli import sweep as sweep_cli

pytest.importorskip("distributed")


class _Junk(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(b"\xff" * 64 + b"HTTP/1.0 200 OK\r\n\r\n")
        time.sleep(2)


class _Silent(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # no lines on the test's stderr
        pass


@pytest.fixture(params=["http", "junk"])
def service(request):
    """A service on a free localhost port that is no Dask scheduler: a plain HTTP server (it waits for a request
    and sends nothing), or a TCP server that sends junk at once."""
    handler = _Silent if request.param == "http" else _Junk
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_service_that_is_not_dask_is_refused_in_one_line(service, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sweep_cli, "SCHEDULER_TIMEOUT_S", 1.0)
    start = time.monotonic()
    code = main(["sweep", "--grid", "seed=0:2", "--epoch", "3", "--trainset_size", "16", "--out", str(tmp_path / "s"),
                 "--scheduler", service, "--quiet"])
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 2 and took < 10, (code, took, err)
    assert err.startswith(f"linattn sweep: error: --scheduler {service}: no Dask scheduler answers there (")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "s").exists()


def test_a_closed_port_is_refused(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed
    assert main(["sweep", "--grid", "seed=0:2", "--out", str(tmp_path / "s"), "--scheduler",
                 f"127.0.0.1:{port}"]) == 2
    assert "no Dask scheduler answers there (Connection refused)" in capsys.readouterr().err


def test_a_dask_scheduler_passes_the_check():
    """The check reads the handshake a real scheduler sends (so it refuses nothing Dask would accept)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", host="127.0.0.1", scheduler_port=0,
                      dashboard_address=":0") as cluster:
        assert sweep_cli._not_dask(cluster.scheduler_address, 10.0) is None
