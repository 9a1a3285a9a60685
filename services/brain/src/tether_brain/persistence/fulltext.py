"""PostgreSQL full-text search, in one place for every store that searches text (the
documents, the memories): the text search configuration the stored vectors are made
with, how a query becomes a `tsquery`, and how many searchable words a query holds.

Each store keeps its own `search` column (a generated `tsvector` with a GIN index, made
with `CONFIG` in its migration) and its own WHERE clause; only the query side is here,
so a query is always parsed with the configuration its vectors were made with."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

# The configuration of every stored vector (migrations 0014, 0018): queries must be
# parsed with the same one, or their words would not stem alike.
CONFIG = "english"

# Web-search syntax (words, "phrases", `or`, `-word`), every word required: what a
# person or a model types into a search box. `websearch_to_tsquery` accepts any text,
# so no query is a syntax error.
ALL_WORDS = "websearch_to_tsquery(CAST(:config AS regconfig), :query)"
# Any of the text's words (ranked by how many match): for text that was not written as
# a query, such as a user's message that recall looks up. `plainto_tsquery` joins the
# normalised words with ` & ` alone (no operators, no phrases), and a lexeme holds no
# space, so turning each ` & ` into ` | ` only changes the joins.
ANY_WORD = (
    "CAST(replace(CAST(plainto_tsquery(CAST(:config AS regconfig), :query) AS text), "
    "' & ', ' | ') AS tsquery)"
)

_WORDS = text(f"SELECT numnode({ALL_WORDS})")


def tsquery(*, any_word: bool = False) -> str:
    """The SQL of the `tsquery` for the parameters `params` gives (`:config`, `:query`)."""
    return ANY_WORD if any_word else ALL_WORDS


def params(query: str) -> dict[str, Any]:
    """The bind parameters `tsquery` reads."""
    return {"config": CONFIG, "query": query}


async def words(conn: AsyncConnection, query: str) -> int:
    """How many searchable terms `query` holds (0: only stop words or punctuation)."""
    return int(await conn.scalar(_WORDS, params(query)) or 0)
