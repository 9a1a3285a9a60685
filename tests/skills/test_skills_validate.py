"""The skill validator (tether_common.skills) and `tether skills validate`."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from tether_client.cli import main
from tether_client.skills_cli import validate_main
from tether_common.errors import MessageError
from tether_common.skills import (
    MAX_BODY_LINES,
    Problem,
    SkillDocument,
    check_collisions,
    check_folder,
    has_errors,
    parse_skill,
    render_skill,
    similarity,
    validate_paths,
)

WriteSkill = Callable[..., Path]


def codes(problems: list[Problem]) -> list[str]:
    return sorted(p.code for p in problems)


def test_shipped_skills_pass_without_warnings(shipped: Path) -> None:
    names = sorted(p.name for p in shipped.iterdir())
    assert names == ["coding-task", "data-report", "incident-triage", "research-brief"]
    assert validate_paths([shipped]) == []


def test_a_good_skill_has_no_problems(write_skill: WriteSkill) -> None:
    doc, problems = check_folder(write_skill("careful-edit"))
    assert problems == []
    assert doc is not None
    assert doc.name == "careful-edit"
    assert doc.body.startswith("# Principles")


def test_front_matter_forms_are_read() -> None:
    text = (
        "---\nname: 'it''s-fine'\ndescription: >\n  Folded text.\n  Use when folding.\n"
        "license: MIT\n# a comment\n---\nBody\n"
    )
    doc = parse_skill(text)
    assert doc.name == "it's-fine"
    assert doc.description == "Folded text. Use when folding."
    assert doc.fields == {"license": "MIT"}
    assert doc.body == "Body"


def test_render_then_parse_round_trips_punctuation() -> None:
    description = 'Say "hi": then #not-a-comment. Use when: always'
    doc = parse_skill(render_skill("x", description, "b"))
    assert (doc.name, doc.description, doc.body) == ("x", description, "b")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("no front matter", "must start"),
        ("---\nname: a\n", "never closed"),
        ("---\nname a\n---\n", "not 'key: value'"),
        ("---\nname: a\n  indented: x\n---\n", "line 3: mapping values are not allowed"),
        ('---\ndescription: "bad \\q"\n---\n', "not valid YAML: line 2: found unknown escape"),
    ],
)
def test_unreadable_front_matter_is_refused(text: str, fragment: str) -> None:
    with pytest.raises(MessageError, match=fragment) as caught:
        parse_skill(text)
    assert caught.value.code == "skill_invalid"


@pytest.mark.parametrize(
    ("name", "description", "body", "expected"),
    [
        ("ok", "Does things.", "b", ["trigger_missing"]),
        ("Bad_Name", "Use when x.", "b", ["name_invalid"]),
        ("ok", "", "b", ["description_missing"]),
        ("ok", "Use when x. " + "y" * 1100, "b", ["description_too_long"]),
        ("ok", "Use when x.", "   ", ["body_empty"]),
        ("ok", "Use when x.", "line\n" * (MAX_BODY_LINES + 1), ["body_too_long"]),
        ("ok", "Use when x.", "z" * 4001, ["body_over_invoke_cap"]),
    ],
)
def test_each_kind_of_problem_is_reported(
    write_skill: WriteSkill, name: str, description: str, body: str, expected: list[str]
) -> None:
    folder = write_skill(name, description, body)
    _, problems = check_folder(folder)
    assert codes(problems) == expected
    assert all(p.message and p.skill == str(folder) for p in problems)


def test_folder_checks(write_skill: WriteSkill, tmp_path: Path) -> None:
    mismatch = write_skill("folder-name", text=render_skill("other-name", "Use when x.", "b"))
    assert codes(check_folder(mismatch)[1]) == ["name_mismatch"]
    no_name = write_skill("nameless", text="---\ndescription: Use when x.\n---\nbody\n")
    assert codes(check_folder(no_name)[1]) == ["name_missing"]
    refs = write_skill("refs", body="See references/deep.md and references/there.md.")
    (refs / "references").mkdir()
    (refs / "references" / "there.md").write_text("x")
    problems = check_folder(refs)[1]
    assert codes(problems) == ["reference_missing"]
    assert "references/deep.md" in problems[0].message
    (tmp_path / "empty").mkdir()
    assert codes(check_folder(tmp_path / "empty")[1]) == ["skill_file_missing"]


def test_worked_examples_and_empty_sections_are_warnings(write_skill: WriteSkill) -> None:
    fence = "```\n" + "x = 1\n" * 13 + "```"
    for body in ("## Worked example\nstep 1", "User: hi\nAssistant: hello", fence):
        problems = check_folder(write_skill("ex", body=body))[1]
        assert codes(problems) == ["worked_example"], body
        assert not has_errors(problems)
    empty = check_folder(write_skill("ex", body="Principle.\n\n## Red flags\n\n## Other\nx"))[1]
    assert codes(empty) == ["section_empty"]
    assert "Red flags" in empty[0].message


def test_description_collisions_and_duplicate_names() -> None:
    first = SkillDocument(
        "sql-review", "Review SQL queries for speed. Use when a query is slow.", "b"
    )
    second = SkillDocument(
        "query-tuning", "Review slow SQL queries for speed. Use when a query is slow.", "b"
    )
    other = SkillDocument("poems", "Write short poems. Use when asked for verse.", "b")
    assert similarity(first.description, second.description) > 0.8
    assert similarity(first.description, other.description) < 0.2
    problems = check_collisions([first, second, other])
    assert codes(problems) == ["description_collision"]
    assert problems[0].skill == "sql-review + query-tuning"
    assert "Use when" in problems[0].message
    assert codes(check_collisions([first, first])) == ["name_duplicate"]


def test_collisions_are_found_across_folders(write_skill: WriteSkill, tmp_path: Path) -> None:
    description = "Triage production incidents and outages. Use when an alert fires."
    write_skill("triage-a", description, root=tmp_path / "one")
    write_skill("triage-b", description, root=tmp_path / "two")
    problems = validate_paths([tmp_path / "one", tmp_path / "two", tmp_path / "absent"])
    assert codes(problems) == ["description_collision", "folder_missing"]


def test_validate_command_exit_codes(write_skill: WriteSkill, shipped: Path) -> None:
    out = io.StringIO()
    assert validate_main([shipped], out=out) == 0
    assert out.getvalue().endswith("4 skill(s) checked: 0 error(s), 0 warning(s)\n")
    bad = write_skill("no-trigger", "Does things.")
    out = io.StringIO()
    assert validate_main([bad.parent], out=out) == 1
    assert "no-trigger: error: description has no trigger" in out.getvalue()
    warned = write_skill("warned", body="## Examples\nnone")
    assert validate_main([warned], out=io.StringIO()) == 0
    assert validate_main([warned], strict=True, out=io.StringIO()) == 1


def test_subcommands_parse_and_run(shipped: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["skills", "validate", str(shipped), "--strict"]) == 0
    assert "4 skill(s) checked" in capsys.readouterr().out
    assert main(["skills", "list", "--help"]) == 0
