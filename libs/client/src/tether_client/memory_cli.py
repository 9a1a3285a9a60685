"""`tether memory list|search|add|forget`: what runs remember across threads
(`memory_save`, `memory_search`, a thread's recall), through the brain's `/v1/memory`.
A user's token reaches what is kept about that user; an operator's its tenant's."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import RenderableType

from tether_client.console import Format, OutputOption, emit, fields_table, rows_table, say
from tether_client.session import blocking, connect
from tether_common.errors import ErrorCode, MessageError
from tether_common.messages.memory import MemoryView

__all__ = ["app"]

app = typer.Typer(
    help="What runs remember across threads: list, search, add, forget.",
    no_args_is_help=True,
)

TenantOption = Annotated[
    str | None, typer.Option(help="The tenant (admins; others always act on their own).")
]
OwnerOption = Annotated[
    str | None, typer.Option(help="Whose memories (operators; a user: always its own).")
]
AgentOption = Annotated[str | None, typer.Option(help="Only this agent's.")]


def _rows(found: list[MemoryView]) -> RenderableType:
    rows = [
        (m.memory_id, m.agent, m.owner or "(agent-wide)", " ".join(m.text.split())[:70])
        for m in found
    ]
    return rows_table(["MEMORY", "AGENT", "OWNER", "TEXT"], rows) if rows else "no memories"


@app.command("list")
@blocking
async def memory_list(
    owner: OwnerOption = None,
    agent: AgentOption = None,
    agent_wide: Annotated[bool, typer.Option(help="Only the agents' own memories.")] = False,
    tenant: TenantOption = None,
    output: OutputOption = Format.table,
) -> int:
    """What is kept, newest first.

    Example: tether memory list --agent support -o json
    """
    async with connect() as client:
        found = await client.memories(
            owner=owner, agent=agent, agent_wide=agent_wide, tenant=tenant
        )
    emit(found.memories, output, _rows(found.memories))
    return 0


@app.command("search")
@blocking
async def memory_search(
    query: Annotated[str, typer.Argument(help="Words to look for.", show_default=False)],
    agent: Annotated[str | None, typer.Option(help="The agent (none: the default).")] = None,
    owner: OwnerOption = None,
    limit: Annotated[int | None, typer.Option(help="At most this many (1-10).")] = None,
    tenant: TenantOption = None,
    output: OutputOption = Format.table,
) -> int:
    """What a run of that user with that agent finds, best first.

    Example: tether memory search "preferred language" --agent support
    """
    async with connect() as client:
        found = await client.search_memory(
            query, agent=agent, owner=owner, tenant=tenant, limit=limit
        )
    emit(found.memories, output, _rows(found.memories))
    return 0


@app.command("add")
@blocking
async def memory_add(
    text: Annotated[str, typer.Argument(help="The fact to keep.", show_default=False)],
    agent: Annotated[str | None, typer.Option(help="The agent (none: the default).")] = None,
    owner: OwnerOption = None,
    agent_wide: Annotated[
        bool, typer.Option(help="For every user of the agent (operators).")
    ] = False,
    tenant: TenantOption = None,
    output: OutputOption = Format.table,
) -> int:
    """Keep a memory for a user (yourself by default) or for an agent's every user.

    Example: tether memory add "Invoices go out on the 1st." --agent billing --agent-wide
    """
    async with connect() as client:
        added = await client.add_memory(
            text, agent=agent, owner=owner, agent_wide=agent_wide, tenant=tenant
        )
    shown = added.model_dump(mode="json", exclude={"version", "rank"})
    emit(shown, output, fields_table(shown))
    return 0


@app.command("forget")
@blocking
async def memory_forget(
    memory_id: Annotated[
        str | None, typer.Argument(help="One memory (mem_…); with --all, none.")
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Everything kept about the owner (or you).")
    ] = False,
    owner: OwnerOption = None,
    agent: AgentOption = None,
    tenant: TenantOption = None,
) -> int:
    """Forget one memory, or with --all everything kept about a user.

    Example: tether memory forget --all --agent support
    """
    if (memory_id is None) != every:
        raise MessageError(
            "name one memory, or give --all (not both)", code=ErrorCode.INVALID_REQUEST
        )
    async with connect() as client:
        if memory_id is not None:
            await client.forget_memory(memory_id, tenant=tenant)
            say(f"forgot {memory_id}")
            return 0
        gone = await client.forget_memories(owner=owner, agent=agent, tenant=tenant)
    say(f"forgot {gone.forgotten} memories")
    return 0
