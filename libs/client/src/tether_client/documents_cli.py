"""`tether documents add|list|show|remove`: the documents runs retrieve with
`search_documents`, through the brain's `/v1/collections` (an operator token; an admin
names the tenant)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from tether_client.console import Format, OutputOption, emit, fields_table, rows_table, say
from tether_client.session import blocking, connect
from tether_common.errors import ErrorCode, MessageError
from tether_common.messages.documents import AddDocument

__all__ = ["app"]

app = typer.Typer(
    help="Documents runs retrieve: add, list, show, remove (search_documents finds them).",
    no_args_is_help=True,
)

TenantOption = Annotated[
    str | None, typer.Option(help="The tenant (admins; others always act on their own).")
]


def _body(text: str | None, file: Path | None) -> str:
    """The document's text: --text, or --file (`-`: standard input)."""
    if (text is None) == (file is None):
        raise MessageError("give the text with --text or --file", code=ErrorCode.INVALID_REQUEST)
    if text is not None:
        return text
    assert file is not None
    return sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")


@app.command("add")
@blocking
async def documents_add(
    collection: Annotated[str, typer.Argument(help="The collection.", show_default=False)],
    title: Annotated[str, typer.Option(help="The document's title.", show_default=False)],
    reader: Annotated[
        list[str] | None,
        typer.Option(
            "--reader",
            help="Who may retrieve it: role:<role>, user:<name> or * (repeat; none: nobody).",
        ),
    ] = None,
    text: Annotated[str | None, typer.Option(help="The text itself.")] = None,
    file: Annotated[Path | None, typer.Option(help="A UTF-8 text file (- : stdin).")] = None,
    tenant: TenantOption = None,
    output: OutputOption = Format.table,
) -> int:
    """Add a document; only its readers' runs find it with search_documents.

    Example: tether documents add handbook --title "Refunds" --file refunds.md --reader role:operator --reader user:alice
    """
    body = AddDocument(title=title, body=_body(text, file), readers=reader or [], tenant=tenant)
    async with connect() as client:
        added = await client.add_document(collection, body)
    shown = added.model_dump(mode="json", exclude={"body", "version"})
    emit(shown, output, fields_table(shown))
    return 0


@app.command("list")
@blocking
async def documents_list(
    collection: Annotated[
        str | None, typer.Argument(help="A collection (none: the collections).")
    ] = None,
    tenant: TenantOption = None,
    output: OutputOption = Format.table,
) -> int:
    """The collections, or one collection's documents (newest first).

    Example: tether documents list handbook -o json
    """
    async with connect() as client:
        if collection is None:
            found = (await client.collections(tenant=tenant)).collections
            rows = [(c.tenant, c.collection, c.documents) for c in found]
            table = rows_table(["TENANT", "COLLECTION", "DOCUMENTS"], rows)
            emit(found, output, table if rows else "no documents")
            return 0
        docs = (await client.documents(collection, tenant=tenant)).documents
    listed = [(d.doc_id, d.title[:60], ",".join(d.readers) or "(nobody)", d.chars) for d in docs]
    emit(docs, output, rows_table(["DOCUMENT", "TITLE", "READERS", "CHARS"], listed))
    return 0


@app.command("show")
@blocking
async def documents_show(
    collection: Annotated[str, typer.Argument(help="The collection.", show_default=False)],
    doc_id: Annotated[str, typer.Argument(help="The document (doc_…).", show_default=False)],
    tenant: TenantOption = None,
    output: OutputOption = Format.table,
) -> int:
    """One document, its readers and its text.

    Example: tether documents show handbook doc_0123
    """
    async with connect() as client:
        found = await client.document(collection, doc_id, tenant=tenant)
    emit(found, output, fields_table(found.model_dump(mode="json", exclude={"version"})))
    return 0


@app.command("remove")
@blocking
async def documents_remove(
    collection: Annotated[str, typer.Argument(help="The collection.", show_default=False)],
    doc_id: Annotated[str, typer.Argument(help="The document (doc_…).", show_default=False)],
    tenant: TenantOption = None,
) -> int:
    """Remove a document; no run retrieves it any more.

    Example: tether documents remove handbook doc_0123
    """
    async with connect() as client:
        await client.remove_document(collection, doc_id, tenant=tenant)
    say(f"removed {doc_id} from {collection}")
    return 0
