"""`make bench`: the bus floor and the skeleton step, measured in one run, and their ratio.

Starts its own nats-server and PostgreSQL (the embedded binaries) and the five services
as real processes; nothing is shared with a running system.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench.floor import measure_floor
from bench.skeleton import measure_steps
from bench.stats import line, summary
from tether_common.embedded import EmbeddedPostgres, NatsServer
from tether_common.supervisor import Supervisor


async def main(samples: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        nats = NatsServer(base / "nats").start()
        pg = EmbeddedPostgres(base / "pg").start()
        scripts = base / "scripts"
        scripts.mkdir()
        env = {
            "TETHER_NATS_URL": nats.url,
            "TETHER_DATABASE_URL": pg.url,
            "TETHER_GATEWAY_SCRIPTS_DIR": str(scripts),
            "TETHER_LOG_LEVEL": "WARNING",
        }
        supervisor = Supervisor(env, restart=False, log_dir=base / "logs")
        try:
            round_trip, floor = await measure_floor(nats.url, pg.url, samples)
            await supervisor.start()
            await supervisor.wait_ready()
            runs = max(1, samples // 19)
            steps = await measure_steps(supervisor.child("brain").url, scripts, runs)
        finally:
            await supervisor.stop()
            pg.stop()
            nats.stop()
    print(line("nats-py request/reply round trip", round_trip))
    print(line("floor: 2 round trips + 1 durable commit", floor))
    print(line("skeleton step (brain→gateway→runner→PG)", steps))
    (fm, fp), (sm, sp) = summary(floor), summary(steps)
    print(f"ratio skeleton/floor: median {sm / fm:.2f}x  p99 {sp / fp:.2f}x  (target ≤ 1.5x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=1000)
    asyncio.run(main(parser.parse_args().samples))
