"""The live explorer (book/explore.md) in headless Chromium: the built page trains exactly as Python's population
engine.

The page (``_build/html/book/explore.html``, scripts under ``_static/explorer/``) is served on 127.0.0.1 as in
``test_book.py`` and driven through the Chrome DevTools protocol (a websocket, via tornado), so that the training runs
in real time — no virtual-time budget — and its timing means something. For three settings the page starts from
weights exported from Python (``weights=<url>``, a JSON file served next to the page) and its loss curve must equal
``linattn.run.run(RunConfig(..., trainset_size=None, draws="streams"), init=weights)`` to a relative 1e-9 at every
step. Every test is marked ``book``: they skip when the book, the page or Chromium is missing, and fail instead
under ``LINATTN_REQUIRE_BROWSER=1`` (CI), through ``conftest.require_built`` like ``test_book.py``.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote, urlencode

import numpy as np
import pytest
import test_book as tb  # the shared helpers: where the build is, finding Chromium, the quiet handler
from conftest import require_built

from linattn import theory
from linattn.config import RunConfig
from linattn.models import init_weights
from linattn.training.experiment import run

pytestmark = pytest.mark.book

PAGE = "book/explore.html"
EXTRA = "/book/explorer-test/"  # URL prefix of the weight files the tests write (served from a temporary folder)
RTOL = 1e-9


def page_built():
    tb.built()
    if not (tb.HTML / PAGE).is_file():
        require_built(f"{tb.HTML / PAGE} missing: the book was built without the explorer page; rebuild it")
    for name in ("linattn.js", "explorer.js", "explorer.css"):
        assert (tb.HTML / "_static" / "explorer" / name).is_file(), f"_static/explorer/{name} was not copied"


# ------------------------------------------------------------------------------------------- server and browser

class _Handler(tb._Handler):
    """The book's files, plus the tests' weight files under EXTRA."""

    extra_dir: Path

    def translate_path(self, path):
        clean = path.split("?")[0].split("#")[0]
        if clean.startswith(EXTRA):
            return str(self.extra_dir / Path(clean[len(EXTRA):]).name)
        return super().translate_path(path)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base URL, folder whose files are served under EXTRA)."""
    page_built()
    extra = tmp_path_factory.mktemp("explorer-weights")
    handler_cls = type("Handler", (_Handler,), {"extra_dir": extra})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler_cls, directory=str(tb.HTML)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", extra
    httpd.shutdown()
    httpd.server_close()


class Browser:
    """Headless Chromium driven over the DevTools protocol: open a URL, wait for the explorer's result JSON."""

    def __init__(self, profile: Path):
        if importlib.util.find_spec("tornado") is None:  # installed with jupyter/ipykernel
            require_built("tornado is needed to drive Chromium over the DevTools protocol")
        exe = tb.chromium()
        self.proc = subprocess.Popen([exe, *tb.CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1280,2400",
                                      "--remote-debugging-port=0", "--remote-allow-origins=*", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file = profile / "DevToolsActivePort"
        deadline = time.time() + 60
        self.ws_url = None
        while time.time() < deadline and self.ws_url is None:
            try:
                port = int(port_file.read_text().split()[0])
                pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5))
                self.ws_url = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
            except (OSError, ValueError, IndexError, StopIteration):
                time.sleep(0.1)
        if self.ws_url is None:
            self.close()
            raise RuntimeError("Chromium did not open its DevTools port")

    def close(self):
        """End the browser and its helper processes (its own process group, started above)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(timeout=10)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue

    def explore(self, url: str, timeout: float = 120, screenshot: Path | None = None) -> dict:
        """Open ``url`` and return the page's result once its run has finished (or was refused)."""
        return asyncio.run(self._explore(url, timeout, screenshot))

    async def _explore(self, url, timeout, screenshot):
        from tornado.websocket import websocket_connect

        ws = await websocket_connect(self.ws_url, max_message_size=1 << 28)
        counter = iter(range(1, 1 << 30))

        async def call(method, **params):
            ident = next(counter)
            await ws.write_message(json.dumps({"id": ident, "method": method, "params": params}))
            while True:
                msg = json.loads(await ws.read_message())
                if msg.get("id") == ident:
                    assert "error" not in msg, msg
                    return msg["result"]

        try:
            await call("Page.enable")
            await call("Page.navigate", url=url)
            expr = "JSON.stringify([location.href, (document.getElementById('explorer-result') || {}).textContent])"
            deadline = time.time() + timeout
            while time.time() < deadline:
                out = await call("Runtime.evaluate", expression=expr, returnByValue=True)
                href, text = json.loads(out["result"].get("value") or '["", null]')
                if href == url and text:
                    res = json.loads(text)
                    if res.get("status") not in ("loading", "running"):
                        if screenshot is not None:
                            shot = await call("Page.captureScreenshot", format="png")
                            import base64

                            screenshot.write_bytes(base64.b64decode(shot["data"]))
                        return res
                await asyncio.sleep(0.05)
            raise TimeoutError(f"the explorer did not finish within {timeout} s: {url}")
        finally:
            ws.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    page_built()
    tb.chromium()
    b = Browser(tmp_path_factory.mktemp("chromium") / "profile")
    yield b
    b.close()


# ------------------------------------------------------------------------------------------- helpers

def query(model, D, N, H, R, init, era, lr, steps, spectrum, normalize, **extra) -> str:
    q = dict(model=model, D=D, N=N, H=H, R=R, init=init, era=era, lr=lr, steps=steps, seed=0, normalize=normalize,
             spectrum=",".join(repr(float(x)) for x in spectrum), **extra)
    return urlencode(q, quote_via=quote, safe=",/")


def python_loss(s: dict, weights: dict) -> np.ndarray:
    cfg = RunConfig(model=s["model"], in_dim=s["D"], seq_len=s["N"] + 1, head_num=s["H"], rank=s["R"],
                    init=s["init"], init_scheme=s["era"], lr=s["lr"], epoch=s["steps"],
                    cov_matrix=np.diag(s["spectrum"]).tolist(), trainset_size=None, normalize=s["normalize"],
                    draws="streams")
    return run(cfg, init={k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}).history.train_loss


def max_rel(js, py) -> float:
    js, py = np.asarray(js, dtype=np.float64), np.asarray(py, dtype=np.float64)
    assert js.shape == py.shape, f"the page recorded {js.shape[0]} steps, Python {py.shape[0]}"
    return float(np.max(np.abs(js - py) / np.abs(py)))


# ------------------------------------------------------------------------------------------- exactness

D4 = [0.4, 0.3, 0.2, 0.1]
D6 = list(np.arange(1, 7) / 21.0)
CASES = {
    "attnM_D4": dict(model="attnM", D=4, N=31, H=4, R=1, init=0.1, era="dec2025", lr=0.05, steps=300,
                     spectrum=D4, normalize="sum"),
    "attnS_R1_D4": dict(model="attnS", D=4, N=31, H=5, R=1, init=0.3, era="jan2025", lr=0.05, steps=300,
                        spectrum=D4, normalize="sum"),
    "attnS_R2_D6": dict(model="attnS", D=6, N=15, H=4, R=2, init=0.5, era="dec2025", lr=0.5, steps=300,
                        spectrum=D6, normalize="mean"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_page_matches_python_population_run(name, served, browser):
    """The page, started from Python's initial weights, records Python's loss at every step (relative 1e-9)."""
    base, extra = served
    s = CASES[name]
    weights = init_weights(s["model"], head_num=s["H"], in_dim=s["D"], rank=s["R"], init=s["init"],
                           init_scheme=s["era"],
                           rng=np.random.default_rng(7))
    (extra / f"{name}.json").write_text(json.dumps({k: v.tolist() for k, v in weights.items()}))
    py = python_loss(s, weights)
    res = browser.explore(f"{base}/{PAGE}?{query(**s, weights=EXTRA + name + '.json')}")
    assert res["status"] == "done", res.get("message")
    assert res["weights"].startswith("from "), res["weights"]
    assert res["settings"]["D"] == s["D"] and res["settings"]["R"] == s["R"] and not res["notes"]
    err = max_rel(res["loss"], py)
    print(f"{name}: max relative difference page vs Python over {len(py)} steps: {err:.2e}")
    assert err <= RTOL, f"{name}: the page's loss differs from Python's by up to {err:.3g} (relative)"
    assert py[0] - py[-1] > 0.1 * (py[0] - res["L_star"]), f"{name}: the loss barely moved; the check is too weak"
    np.testing.assert_allclose(res["plateaus"], theory.plateau_losses(np.diag(s["spectrum"]), s["N"]), rtol=1e-12)


def test_page_refuses_ragged_or_non_finite_weights(served, browser):
    """Weights whose first rows have the right shape but a later row does not (or holds NaN) get a message."""
    base, extra = served
    s = dict(CASES["attnS_R1_D4"], steps=20)
    w = {k: v.tolist() for k, v in init_weights("attnS", head_num=s["H"], in_dim=4, rank=1, init=0.3,
                                               init_scheme="jan2025", rng=np.random.default_rng(0)).items()}
    ragged, nan = json.loads(json.dumps(w)), json.loads(json.dumps(w))
    ragged["W_V"][2][3] = ragged["W_V"][2][3][:2]
    nan["W_Q"][1][0][2] = "NaN"
    for name, bad, says in (("ragged", ragged, "W_V[2][3] should be a list of 5"),
                            ("nan", nan, "W_Q[1][0][2] is not a finite number")):
        (extra / f"{name}.json").write_text(json.dumps(bad))
        res = browser.explore(f"{base}/{PAGE}?{query(**s, weights=EXTRA + name + '.json')}")
        assert res["status"] == "error" and says in res["message"], res


@pytest.mark.parametrize("model,era", [("attnS", "dec2024"), ("attnS", "jan2025"), ("attnS", "dec2025"),
                                       ("attnM", "jan2025")])
def test_page_init_layout_and_its_run(model, era, served, browser):
    """The page's own seeded initial weights have init.npz's layout, zero blocks and scales; Python trained from
    them (dump_init=1) gives the page's curve."""
    base, _ = served
    s = dict(model=model, D=5, N=20, H=6, R=2 if model == "attnS" else 1, init=0.15, era=era, lr=0.02, steps=120,
             spectrum=[0.3, 0.25, 0.2, 0.15, 0.1], normalize="sum")
    res = browser.explore(f"{base}/{PAGE}?{query(**s, dump_init='1')}")
    assert res["status"] == "done", res.get("message")
    w = {k: np.asarray(v) for k, v in res["init"].items()}
    H, R, D, E, init = s["H"], s["R"], s["D"], s["D"] + 1, s["init"]
    if model == "attnM":
        assert w["W_KQ"].shape == (H, E, E) and w["W_V"].shape == (H, E, E)
        assert not w["W_KQ"][:, :D, D].any() and not w["W_V"][:, D, :D].any()
        kq_std, v_std = init, init
    else:
        assert w["W_Q"].shape == (H, R, E) and w["W_K"].shape == (H, R, E) and w["W_V"].shape == (H, E, E)
        kq_std = {"dec2024": init, "jan2025": init / np.sqrt(R * E), "dec2025": init / np.sqrt(H * R * E)}[era]
        v_std = {"dec2024": None, "jan2025": init, "dec2025": init / (np.sqrt(H) * E)}[era]
        if era == "dec2024":
            assert w["W_K"][:, :, D].all(), "dec2024 zeroes nothing in W_K"
            expect = np.zeros((H, E, E))
            expect[:, D, D] = init
            np.testing.assert_array_equal(w["W_V"], expect)
        else:
            assert not w["W_K"][:, :, D].any() and not w["W_V"][:, D, :D].any()
        sample = np.concatenate([w["W_Q"].ravel(), w["W_K"][:, :, :D].ravel()])
        assert 0.7 < sample.std() / kq_std < 1.3, (sample.std(), kq_std)
    if v_std is not None:
        mask = np.ones((H, E, E), bool)
        mask[:, D, :D] = False
        assert 0.8 < w["W_V"][mask].std() / v_std < 1.2
    err = max_rel(res["loss"], python_loss(s, w))
    assert err <= RTOL, f"{model} {era}: page vs Python {err:.3g}"


def test_ten_thousand_steps_timing(served, browser, capsys):
    """10 000 steps of ATTN_S at D = 8, H = 9, R = 2 in headless Chromium: the time is printed, not asserted
    (target: under 2 s)."""
    base, _ = served
    s = dict(model="attnS", D=8, N=31, H=9, R=2, init=5e-3, era="jan2025", lr=0.02, steps=10000,
             spectrum=list(np.arange(1, 9) / 36.0), normalize="sum")
    res = browser.explore(f"{base}/{PAGE}?{query(**s)}")
    assert res["status"] == "done" and res["steps_done"] == 10000, res.get("message")
    assert np.all(np.isfinite(res["loss"]))
    with capsys.disabled():
        print("\n[explorer] 10,000 ATTN_S steps (D = 8, H = 9, R = 2) in headless Chromium: "
              f"{res['wall_seconds']:.3f} s "
              f"wall ({res['steps_per_second']:.0f} steps/s; {res['compute_seconds']:.3f} s computing, "
              f"{res['compute_steps_per_second']:.0f} steps/s; moments {res['moments_seconds'] * 1000:.0f} ms)")


# ------------------------------------------------------------------------------------------- offline and bad input

def test_page_works_from_file_url(browser, tmp_path):
    """Opened straight from disk (file://, no server): the scripts load, it trains and draws; bad input gets a
    message, not a blank or frozen plot."""
    page_built()
    url = (tb.HTML / PAGE).resolve().as_uri()
    shot = tmp_path / "explore.png"
    res = browser.explore(url + "?model=attnM&D=3&N=10&H=2&init=0.1&lr=0.1&steps=200&spectrum=white",
                          screenshot=shot)
    assert res["status"] == "done" and len(res["loss"]) == 200 and res["loss"][-1] < res["loss"][0]
    assert shot.stat().st_size > 20_000 and tb.non_blank(shot) > 0.02, "the page looks blank"
    tb.SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, tb.SHOTS / "explore.png")

    res = browser.explore(url + "?model=attnS&D=12&H=0&R=5&N=31&steps=50&spectrum=paper&lr=0.01")
    assert res["status"] == "done" and res["settings"]["D"] == 8 and res["settings"]["H"] == 1
    assert "clamped" in res["notes"] and res["steps_done"] == 50

    res = browser.explore(url + "?model=attnS&D=3&spectrum=0.5,-0.2,0.1")
    assert res["status"] == "error" and "positive" in res["message"]

    res = browser.explore(url + "?model=attnM&D=3&N=10&H=2&init=1&lr=5&steps=500&spectrum=white")
    assert res["status"] == "diverged" and "smaller learning rate" in res["message"]
    assert res["steps_done"] < 500 and np.all(np.isfinite(res["loss"]))
