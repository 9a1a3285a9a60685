"""A name resolver's tables are built once per offered set (names, own aliases, alias
table) and shared; a set that differs in any of those gets its own."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from tether_common.messages.gateway import OfferedToolSpec
from tether_common.toolcalls import ToolSpec, fit_call
from tether_common.toolcalls.aliases import NameResolver, _tables

SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class AliasedTool(BaseModel):
    """A pydantic tool model that declares its aliases as a field."""

    name: str
    parameters: dict[str, Any]
    aliases: list[str] = []


class OpenTool(BaseModel):
    """A pydantic tool model that takes any extra field, `aliases` among them."""

    model_config = ConfigDict(extra="allow")

    name: str
    parameters: dict[str, Any]


def offered(*names: str) -> list[OfferedToolSpec]:
    return [OfferedToolSpec(name=n, description="", parameters=SCHEMA) for n in names]


def test_the_same_offered_set_is_resolved_with_the_tables_built_once() -> None:
    _tables.cache_clear()
    for _ in range(5):  # a fresh request each time, as the gateway gets them
        call = fit_call("calc", {}, offered("calculate", "shell", "file_read"))
        assert call is not None
        assert call.name == "calculate"
    assert _tables.cache_info().misses == 1
    assert _tables.cache_info().hits == 4


def test_an_offer_differing_in_names_aliases_or_table_resolves_afresh() -> None:
    base = [ToolSpec("deploy", SCHEMA, aliases=("ship",))]
    assert NameResolver(base, None).resolve("ship") == "deploy"
    renamed = [ToolSpec("deploy", SCHEMA, aliases=("launch",))]
    assert NameResolver(renamed, None).resolve("ship") is None
    assert NameResolver(renamed, None).resolve("launch") == "deploy"
    assert NameResolver(base, {"push": "deploy"}).resolve("push") == "deploy"
    assert NameResolver(base, None).resolve("push") is None


def test_pydantic_tools_declaring_aliases_keep_them() -> None:
    fielded = AliasedTool(name="deploy", parameters=SCHEMA, aliases=["ship"])
    extra = OpenTool(name="deploy", parameters=SCHEMA, aliases=["roll out"])
    assert NameResolver([fielded], None).resolve("ship") == "deploy"
    assert NameResolver([extra], None).resolve("Roll-Out") == "deploy"
    assert NameResolver(offered("deploy"), None).resolve("ship") is None
