"""The same loop on LangGraph with its PostgreSQL checkpointer, for the ratio (issue 3).

A two-node graph, model → tool → model …, with a zero-cost fake model that calls the same
trivial tool (`calculate`, a different expression each step) and then answers; the
prebuilt `ToolNode`; `AsyncPostgresSaver` on the same PostgreSQL server, written
synchronously every super-step (`durability="sync"`, so a step is durable when it
returns, as in Tether). A step's time is the gap between consecutive model-node updates.
Needs the `bench` dependency group (`make bench` installs it).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from bench.stats import summary

# One connection per thread in flight: LangGraph's best case (the brain has 10).
POOL_SIZE = 50
# "sync": each super-step's checkpoint is written before the next starts (a durable step,
# as in Tether); "async" (LangGraph's default) writes it while the next step runs.
Durability = Literal["sync", "async"]


@tool
def calculate(expression: str) -> str:
    """Evaluate `a + b` for integers (the trivial tool)."""
    left, right = expression.split("+")
    return str(int(left) + int(right))


def fake_model(steps: int) -> Any:
    """Zero cost: a tool call per step until the last, which answers."""

    def model(state: MessagesState) -> dict[str, list[AnyMessage]]:
        done = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
        if done >= steps - 1:
            return {"messages": [AIMessage(content="done")]}
        call = {"name": "calculate", "args": {"expression": f"{done} + 1"}, "id": f"c{done}"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    return model


def build(steps: int, saver: AsyncPostgresSaver) -> CompiledStateGraph[Any, Any, Any, Any]:
    graph = StateGraph(MessagesState)
    graph.add_node("model", fake_model(steps))
    graph.add_node("tools", ToolNode([calculate]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=saver)


async def one_run(
    app: CompiledStateGraph[Any, Any, Any, Any], thread: str, steps: int, durability: Durability
) -> list[float]:
    """One thread to the end; the wall-clock time of each model step."""
    config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": 2 * steps + 10}
    marks: list[float] = []
    async for update in app.astream(
        {"messages": [HumanMessage(content="bench")]},
        config,
        stream_mode="updates",
        durability=durability,
    ):
        if "model" in update:
            marks.append(time.perf_counter())
    assert len(marks) == steps, len(marks)
    return marks


@dataclass(frozen=True, slots=True)
class GraphBatch:
    steps: int
    seconds: float
    per_step_ms: list[float]

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds


async def batch(
    pool: AsyncConnectionPool[Any], runs: int, steps: int, tag: str, durability: Durability
) -> GraphBatch:
    app = build(steps, AsyncPostgresSaver(pool))
    started = time.perf_counter()
    marks = await asyncio.gather(
        *(one_run(app, f"{tag}-{i}", steps, durability) for i in range(runs))
    )
    seconds = time.perf_counter() - started
    gaps = [(b - a) * 1000 for m in marks for a, b in pairwise(m)]
    return GraphBatch(runs * steps, seconds, gaps)


async def level_batch(
    pool: AsyncConnectionPool[Any], level: int, total_steps: int, durability: Durability
) -> GraphBatch:
    """Short runs in rounds, exactly as `bench.loop.level_batch` runs Tether's."""
    steps = min(40, max(20, total_steps // level))
    rounds = min(10, max(1, total_steps // (level * steps)))
    batches = [
        await batch(pool, level, steps, f"{durability}-{level}-{r}", durability)
        for r in range(rounds)
    ]
    return GraphBatch(
        sum(b.steps for b in batches),
        sum(b.seconds for b in batches),
        [ms for b in batches for ms in b.per_step_ms],
    )


async def measure_langgraph(
    pg_url: str, levels: tuple[int, ...], total_steps: int, long: int
) -> dict[tuple[Durability, int], GraphBatch]:
    """Steps/s and per-step time at each concurrency level in both durability modes, and
    the growth over one long run (durable mode)."""
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    results: dict[tuple[Durability, int], GraphBatch] = {}
    async with AsyncConnectionPool(
        pg_url, min_size=2, max_size=POOL_SIZE, kwargs=kwargs, open=False
    ) as pool:
        await AsyncPostgresSaver(pool).setup()  # type: ignore[arg-type]  # dict_row pool, as documented
        await batch(pool, 5, 10, "warm", "sync")
        print(f"{'in flight':>9} {'steps':>6} {'steps/s':>8}  per-step median / p99   (LangGraph)")
        for durability in ("sync", "async"):
            for level in levels:
                result = await level_batch(pool, level, total_steps, durability)
                median, p99 = summary(result.per_step_ms)
                print(
                    f"{level:9} {result.steps:6} {result.steps_per_s:8.0f}"
                    f"  {median:7.2f} ms / {p99:7.2f} ms   durability={durability}"
                )
                results[durability, level] = result
        if long:
            await long_run(pool, long)
    return results


async def long_run(pool: AsyncConnectionPool[Any], steps: int) -> None:
    gaps = (await batch(pool, 1, steps, "long", "sync")).per_step_ms
    head, tail = statistics.median(gaps[:50]), statistics.median(gaps[-50:])
    print(
        f"LangGraph long run ({steps} steps, sync): first 50 median {head:.2f} ms, "
        f"last 50 median {tail:.2f} ms, {tail / head:.2f}x"
    )
