"""A run's typed answers as its start pins them (`RunOptions.output_schemas`): the agent's
output schema and the run's own, each of which must accept the answer (so a run's schema
can only narrow its agent's, never loosen it), and how many repair rounds the agent
allows. Pinned, so a change to the agent mid-run never changes what its caller gets."""

from __future__ import annotations

from typing import Any

from tether_common.messages.agents import AgentConfig

__all__ = ["pinned_output"]


def pinned_output(config: AgentConfig, asked: dict[str, Any] | None) -> dict[str, Any]:
    """The run options that make a run typed (none for an untyped run)."""
    schemas: list[dict[str, Any]] = []
    for schema in (config.output_schema, asked):
        if schema is not None and schema not in schemas:  # the same schema once
            schemas.append(schema)
    if not schemas:
        return {}
    return {"output_schemas": tuple(schemas), "output_repairs": config.output_repairs}
