"""``genembed serve`` as users run it: a subprocess on a loopback port, stopped with SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from genembed.cli.app import app

runner = CliRunner()


def test_bad_limits_are_a_clean_error():
    result = runner.invoke(app, ["serve", "--steps", "30", "--max-steps", "20"])
    assert result.exit_code == 2
    assert "default_steps (30) exceeds max_steps (20)" in result.output


def test_bad_serving_options_are_clean_errors(tmp_path):
    result = runner.invoke(app, ["serve", "--instructions", str(tmp_path / "missing.json")])
    assert result.exit_code == 2 and "missing.json: cannot read the instructions file" in result.output
    result = runner.invoke(app, ["serve", "--rerank-scoring", "listwise"])
    assert result.exit_code == 2 and "rerank_scoring must be one of" in result.output


def test_generator_options_are_checked(tiny_folder, tmp_path):
    result = runner.invoke(app, ["serve", "--model", str(tiny_folder), "--generator", str(tmp_path)])
    assert (
        result.exit_code == 2 and f"generation adapter folder {tmp_path} holds no adapter_config.json" in result.output
    )


def test_warns_when_exposed_without_a_key(tmp_path):
    result = runner.invoke(app, ["serve", "--host", "0.0.0.0", "--model", str(tmp_path / "missing")])
    assert "warning: serving on 0.0.0.0 without --api-key" in result.output
    assert result.exit_code == 2 and "does not exist" in result.output  # then the missing model stops it


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.integration
def test_serve_subprocess_answers_and_stops_on_sigterm(tmp_path, tiny):
    from genembed.model import GenerativeEmbedder

    # a model saved with its settings (model.save) is served with its own K unless --steps says otherwise
    tiny_model = GenerativeEmbedder(tiny, steps=3)
    folder = tiny_model.save(tmp_path / "tiny-model")
    port = _free_port()
    script = Path(sys.executable).with_name("genembed")
    command = [str(script)] if script.exists() else [sys.executable, "-c", "from genembed.cli.app import main; main()"]
    instructions = tmp_path / "instructions.json"
    instructions.write_text('{"query": "Given a question, find its answer."}')
    command += ["serve", "--model", str(folder), "--port", str(port), "--api-key", "k", "--max-inputs", "2"]
    command += ["--device", "cpu", "--instructions", str(instructions), "--cors-origin", "https://app.example"]
    log = tmp_path / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*command, "--log-level", "info"], stdout=out, stderr=subprocess.STDOUT)
    try:
        url, headers = f"http://127.0.0.1:{port}", {"Authorization": "Bearer k"}
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not come up:\n" + log.read_text()
            time.sleep(0.2)
        texts = ["hello there", "The quick brown fox"]
        body = httpx.post(url + "/v1/embeddings", json={"input": texts}, headers=headers, timeout=60).json()
        got = np.array([d["embedding"] for d in body["data"]])
        np.testing.assert_allclose(got, tiny_model.encode(texts), atol=1e-5)
        assert body["model"] == "tiny-llama-0"  # a saved model keeps its backbone's name
        too_many = httpx.post(url + "/v1/embeddings", json={"input": ["a", "b", "c"]}, headers=headers)
        assert too_many.status_code == 413
        assert httpx.post(url + "/v1/embeddings", json={"input": "a"}).status_code == 401
        info = httpx.get(url + "/info", headers=headers).json()
        assert info["device"] == "cpu" and info["instructions"]["query"] == "Given a question, find its answer."
        assert (info["method"], info["default_steps"]) == ("gircse", 3)
        query = httpx.post(url + "/v1/embeddings", json={"input": texts, "input_type": "search_query"}, headers=headers)
        expected = tiny_model.encode(texts, instruction="Given a question, find its answer.")
        np.testing.assert_allclose(np.array([d["embedding"] for d in query.json()["data"]]), expected, atol=1e-5)
        cors = httpx.get(url + "/health", headers={"Origin": "https://app.example"})
        assert cors.headers["access-control-allow-origin"] == "https://app.example"
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal so the exit status reports it
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
        output = log.read_text()
        assert f"serving tiny-llama-0 on http://127.0.0.1:{port}" in output
        assert "generating with tiny-llama-0 (base weights)" in output and "note:" not in output  # no adapter
        assert "Shutting down" in output and "Finished server process" in output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_busy_port_fails_before_the_model_loads(tmp_path):
    import socket
    import time

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        start = time.perf_counter()
        # a model that does not exist: the port is reported first, so nothing was loaded
        result = runner.invoke(app, ["serve", "--port", str(port), "--model", str(tmp_path / "missing")])
        assert time.perf_counter() - start < 5
    assert result.exit_code == 2
    assert f"cannot listen on port {port} of 127.0.0.1" in result.output and "--port" in result.output
    assert "does not exist" not in result.output and "serving" not in result.output


def test_centering_options_reach_the_server(tiny_folder, monkeypatch):
    import genembed.serve
    from genembed.encoders.centering import center_cache

    served = {}
    monkeypatch.setattr(
        genembed.serve, "run_server", lambda app, **kwargs: served.setdefault("state", app.state.genembed)
    )
    args = ["serve", "--model", str(tiny_folder), "--port", "0", "--center", "--center-named-only"]
    result = runner.invoke(app, [*args, "--center-cache-size", "3"])
    assert result.exit_code == 0, result.output
    state = served["state"]
    assert state.model.center and state.settings.center_named_only and state.settings.center_cache_size == 3
    assert center_cache(state.model.backbone).max_size == 3
    result = runner.invoke(app, ["serve", "--center-cache-size", "-1"])
    assert result.exit_code == 2 and "--center-cache-size" in result.output


def test_limits_and_port_left_unset_are_the_settings_defaults(tiny_folder, monkeypatch):
    import genembed.serve
    from genembed.serve.settings import CENTERING_LIMITS, LIMITS, ServeSettings

    served = {}
    monkeypatch.setattr(genembed.serve, "run_server", lambda app, **kwargs: served.update(app=app, **kwargs))
    result = runner.invoke(app, ["serve", "--model", str(tiny_folder)])
    assert result.exit_code == 0, result.output
    settings, defaults = served["app"].state.genembed.settings, ServeSettings()
    for name in (*LIMITS, *CENTERING_LIMITS, "port", "rerank_scoring", "center_cache_size"):
        assert getattr(settings, name) == getattr(defaults, name), name
    assert served["port"] == defaults.port and f":{defaults.port} " in result.output
    given = ["--max-inputs", "7", "--max-new-tokens", "9", "--max-centering-queue", "0", "--max-centering-wait", "4"]
    given += ["-p", "0"]
    result = runner.invoke(app, ["serve", "--model", str(tiny_folder), *given])
    assert result.exit_code == 0, result.output
    settings = served["app"].state.genembed.settings
    assert (settings.max_inputs, settings.max_new_tokens, settings.max_centering_queue) == (7, 9, 0)
    assert settings.max_centering_wait == 4.0
    assert settings.default_max_new_tokens == 9 and served["port"] == 0


def test_the_serve_help_states_the_settings_defaults_and_the_embed_routes():
    from genembed.serve.settings import ServeSettings

    result = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())
    assert f"(default {ServeSettings.max_input_tokens})" in text and f"default {ServeSettings.port})" in text
    assert "/v1/embed and /v2/embed" in text
