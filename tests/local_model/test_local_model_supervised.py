"""The llama.cpp server `tether up` starts is kept running: killed, it is started again on
the same port and answers again, and stopping its keeper stops the restarts."""

from __future__ import annotations

import asyncio
import contextlib

import httpx

from tether_client.local_model import LlamaServer, supervise, wait_ready
from tether_common.testing import until


async def test_a_killed_model_server_is_started_again(llama: LlamaServer) -> None:
    keeper = asyncio.create_task(supervise(llama, poll_s=0.1))
    try:
        first = llama.proc.pid
        llama.proc.kill()
        llama.proc.wait()
        async with asyncio.timeout(120):
            # The keeper announces nothing; it is watched.
            await until(
                lambda: llama.restarts > 0 and llama.proc.pid != first,
                timeout=120,
                every=0.1,
                what="the model server started again",
            )
            await wait_ready(llama, timeout=110)
        async with httpx.AsyncClient(timeout=10) as client:
            models = await client.get(f"{llama.base_url}/models")
        assert models.status_code == 200
        assert llama.restarts == 1
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
    assert llama.proc.poll() is None  # cancelling the keeper leaves the server to its owner
