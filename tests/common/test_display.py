"""`tether_common.display`: the class of invisible and reordering code points is exactly
what Unicode says (checked against `unicodedata`), every one of them is shown as a
visible `⟨U+XXXX⟩`, the shown text can be read back without ambiguity, ordinary text in
any script is left alone, and the CLI's table, JSON and YAML output carry none of them
raw."""

from __future__ import annotations

import json
import re
import unicodedata
from itertools import pairwise

import pytest
import yaml

from display_corpus import CORPUS, PLAIN, SERVICE_CORPUS
from tether_client.console import Format, emit, safe
from tether_client.fields import SELECTED
from tether_common.display import INVISIBLE, MARK, RANGES, js_pattern, shown, shown_data

# Unicode 14.0's DerivedCoreProperties.txt, Default_Ignorable_Code_Point.
DEFAULT_IGNORABLE = [
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
    (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
]  # fmt: skip
CATEGORIES = {"Cc", "Cf", "Co", "Cs", "Zl", "Zp"}


def derived() -> set[int]:
    found = {c for c in range(0x110000) if unicodedata.category(chr(c)) in CATEGORIES}
    found -= {ord("\t"), ord("\n")}
    for a, b in DEFAULT_IGNORABLE:
        found |= set(range(a, b + 1))
    return found


def unshown(text: str) -> str:
    return re.sub("⟨U\\+([0-9A-F]{4,6})⟩", lambda m: chr(int(m.group(1), 16)), text)


def test_the_table_is_what_unicode_says() -> None:
    assert unicodedata.unidata_version == "14.0.0", "a new Unicode: derive RANGES again"
    table = {c for a, b in RANGES for c in range(a, b + 1)}
    assert table == derived()
    assert list(RANGES) == sorted(RANGES)
    assert all(a <= b < c for (a, b), (c, _) in pairwise(RANGES))


@pytest.mark.parametrize(("name", "expected"), CORPUS)
def test_each_tricky_name_is_shown_as_what_it_is(name: str, expected: str) -> None:
    assert shown(name) == expected
    assert safe(name) == expected  # the CLI's
    assert INVISIBLE.search(shown(name)) is None
    assert unshown(shown(name)) == name


@pytest.mark.parametrize("text", PLAIN)
def test_visible_text_is_left_alone(text: str) -> None:
    assert shown(text) == text


def test_every_code_point_of_the_class_is_escaped_and_no_other() -> None:
    every = "".join(chr(c) for c in range(0x110000))
    escaped = {ord(unshown(m.group())) for m in re.finditer("⟨U\\+[0-9A-F]+⟩", shown(every))}
    assert escaped == derived() | {ord(MARK)}
    assert unshown(shown(every)) == every


def test_shown_data_reaches_keys_and_nested_values() -> None:
    data = {"pa\u202eth": ["a\u200bb", {"k": "\ufeffv", "n": 3}], "ok": None}
    assert shown_data(data) == {
        "pa⟨U+202E⟩th": ["a⟨U+200B⟩b", {"k": "⟨U+FEFF⟩v", "n": 3}],
        "ok": None,
    }


def test_the_javascript_pattern_names_the_same_ranges() -> None:
    spans = re.findall(r"\\u\{([0-9A-F]+)\}-\\u\{([0-9A-F]+)\}", js_pattern())
    assert [(int(a, 16), int(b, 16)) for a, b in spans] == list(RANGES)
    assert js_pattern().endswith("\\u{27E8}]")


@pytest.mark.parametrize("fmt", [Format.table, Format.json, Format.jsonl, Format.yaml])
def test_the_cli_formats_carry_no_invisible_code_point(
    fmt: Format, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {name: [name, {"path": name}] for name, _ in SERVICE_CORPUS}
    SELECTED.set(())  # no `-o` fields: an earlier in-process CLI call may have chosen some
    capsys.readouterr()
    emit(data, fmt)
    out = capsys.readouterr().out
    assert INVISIBLE.search(out) is None
    match fmt:
        case Format.json | Format.jsonl:
            assert json.loads(out) == data
        case Format.yaml:
            assert yaml.safe_load(out) == data
        case Format.table:
            assert "invoice⟨U+202E⟩gpj.sh" in out
