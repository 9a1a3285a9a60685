"""Where the CLI's output goes: Rich consoles for stdout and stderr, the `-o` formats every
read command takes (`table`, `json`, `jsonl`, `yaml`, and `value`; a format may select
fields, `-o json=run_id,status`: `tether_client.fields`), and server text made safe for a
terminal.

Everything shown comes from the system (prompts, model answers, tool output, arguments),
so it may hold terminal control sequences that would rewrite what an operator sees (an
approval card whose arguments hide themselves) or bidi controls and zero-width characters
that make a name read as another (`invoice\\u202egpj.sh` as `invoicehs.jpg`). Text is
printed as Rich `Text`, never as markup, with every such code point shown as `⟨U+202E⟩`
(`tether_common.display`, the class the operator pages use too); JSON and YAML escape
them the way those formats do (`\\u202e`), so the data reads back unchanged.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from tether_client.fields import SELECTED, parse_selection, records, select
from tether_common.display import INVISIBLE, shown

__all__ = [
    "Format",
    "OutputOption",
    "emit",
    "err",
    "fields_table",
    "rows_table",
    "safe",
    "say",
    "stdout",
    "to_data",
]

# Wide enough that a table in a pipe keeps one row per line (a terminal uses its own width).
PIPE_WIDTH = 4096


class Format(StrEnum):
    table = "table"
    json = "json"
    jsonl = "jsonl"  # JSON Lines: one compact value a line (a stream's events, a list's items)
    yaml = "yaml"
    value = "value"  # the selected fields' values alone, tab-separated (needs fields)


def parse_output(text: str | Format) -> Format:
    """`-o FORMAT[=PATH,…]` as its format, its fields kept for `emit`; a bad one is a
    usage error (exit 2) saying why."""
    try:
        chosen = parse_selection(str(text))
        fmt = Format(chosen.format)
    except ValueError as exc:
        names = ", ".join(f.value for f in Format)
        why = str(exc) if "=" in str(text) else f"{text!r}: choose one of {names}"
        raise typer.BadParameter(why) from None
    if chosen.paths and fmt is Format.table:
        raise typer.BadParameter("fields select from json, jsonl, yaml or value output")
    if fmt is Format.value and not chosen.paths:
        raise typer.BadParameter("value shows selected fields: e.g. -o value=run_id,status")
    SELECTED.set(chosen.paths)
    return fmt


OutputOption = Annotated[
    Format,
    typer.Option(
        "--output",
        "-o",
        help="table (for people); json, jsonl (one value a line) or yaml (for programs); "
        "FORMAT=PATH,... selects fields (e.g. json=run_id,usage.steps; value=run_id "
        "prints the values alone).",
        metavar="FORMAT[=FIELDS]",
        parser=parse_output,
    ),
]


def safe(text: str) -> str:
    """`text` with control characters (but newline and tab) and every other invisible or
    reordering code point shown as `⟨U+XXXX⟩`."""
    return shown(text)


def _console(file: Any) -> Console:
    console = Console(file=file, soft_wrap=True, highlight=False, emoji=False)
    if not console.is_terminal:  # a pipe (FORCE_COLOR counts as a terminal, as Rich says)
        console.width = PIPE_WIDTH
    return console


def stdout() -> Console:
    """A console on the current `sys.stdout` (looked up per call: tests swap it)."""
    return _console(sys.stdout)


def stderr() -> Console:
    return _console(sys.stderr)


def say(line: str, style: str | None = None) -> None:
    """One line of system text to stdout, made safe, flushed (it interleaves with events)."""
    stdout().print(Text(safe(line), style=style or ""))
    sys.stdout.flush()


def err(line: str, style: str | None = None) -> None:
    stderr().print(Text(safe(line), style=style or ""))


def to_data(value: Any) -> Any:
    """Pydantic models and containers of them as plain JSON-able data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): to_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_data(v) for v in value]
    return value


def _utf16_escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


def _json(data: Any) -> str:
    text = json.dumps(to_data(data), indent=2, ensure_ascii=False, default=str)
    # JSON escapes C0 itself; the rest of the class only appears inside strings (outside
    # them there is only ASCII), where \u escapes read back as the same text.
    return INVISIBLE.sub(_utf16_escape, text)


@functools.cache
def _yaml_dumper() -> Any:
    """A dumper that double-quotes every string holding an invisible code point, the one
    YAML style with escapes (PyYAML writes most of them raw in any style when unicode is
    allowed). Built on first use: only `-o yaml` pays for importing PyYAML."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def quoted_if_invisible(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = '"' if INVISIBLE.search(value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, quoted_if_invisible)
    return Dumper


def _yaml_escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _yaml(data: Any) -> str:
    import yaml

    text = yaml.dump(to_data(data), Dumper=_yaml_dumper(), sort_keys=False, allow_unicode=True)
    # What is still raw sits in a double-quoted scalar, where \u and \U escapes are valid.
    return INVISIBLE.sub(_yaml_escape, text)


def cell(value: Any) -> Text:
    if isinstance(value, Text):  # already made safe and styled by the caller
        return value
    if value is None:
        return Text("-", style="dim")
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    return Text(safe(str(value)))


def rows_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A borderless table (first column flush left, so `cut`/`awk` still work)."""
    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(cell(v) for v in row))
    return table


def fields_table(data: Mapping[str, Any]) -> Table:
    """One record as `key  value` lines (nested values as compact JSON)."""
    table = Table(box=None, pad_edge=False, show_header=False, show_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in to_data(data).items():
        flat = json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value
        table.add_row(Text(safe(str(key))), cell(flat))
    return table


def _compact(data: Any) -> str:
    text = json.dumps(to_data(data), ensure_ascii=False, default=str, separators=(",", ":"))
    return INVISIBLE.sub(_utf16_escape, text)


def _value_line(record: Mapping[str, Any]) -> str:
    """The selected values of one record, tab-separated: text as is (made safe, a tab or
    newline in it escaped so a record stays one line), others as compact JSON."""
    cells = []
    for value in record.values():
        text = "" if value is None else value if isinstance(value, str) else _compact(value)
        cells.append(safe(text).replace("\t", "\\t").replace("\n", "\\n"))
    return "\t".join(cells)


def _selected(data: Any, fmt: Format) -> Any:
    """`data` reduced to the fields `-o` selected, record by record (a list's items)."""
    paths = SELECTED.get()
    if not paths or fmt is Format.table:
        return data
    data = to_data(data)
    if isinstance(data, list):
        return [select(item, paths) for item in data]
    return select(data, paths)


def emit(data: Any, fmt: Format, table: RenderableType | None = None) -> None:
    """`data` as JSON, JSON Lines (a list: an item a line), YAML or selected values, or, for
    people, the given table or lines (a `str` is system text, shown safe; default: `data`
    as a key/value table)."""
    data = _selected(data, fmt)
    match fmt:
        case Format.json:
            sys.stdout.write(_json(data) + "\n")
        case Format.jsonl:
            sys.stdout.writelines(_compact(item) + "\n" for item in records(data))
        case Format.value:
            sys.stdout.writelines(_value_line(item) + "\n" for item in records(data))
        case Format.yaml:
            sys.stdout.write(_yaml(data))
        case Format.table:
            if table is None:
                table = fields_table(to_data(data))
            if isinstance(table, str):
                say(table)
            else:
                stdout().print(table)
    sys.stdout.flush()
