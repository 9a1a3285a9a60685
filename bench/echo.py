"""A bare nats-py responder in its own process: the floor's other side."""

from __future__ import annotations

import asyncio
import sys

import nats
from nats.aio.msg import Msg

from tether_common.bus import settle


async def main(url: str, subject: str) -> None:
    nc = await nats.connect(url)

    async def reply(msg: Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(subject, cb=reply)
    await settle(nc)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
