"""The compact prompt tier and the stable prompt prefix, on the real built-in tool
descriptors, counted with the brain's own token estimate (`fitting.estimate`: characters
/ 3.5 + 6 a message) as a native-tools model and as a text-protocol model (the gateway's
`textual_request`) would read the request."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from builtin_tools import RUNNER_TOOLS, offered
from tether_brain.context.cards import compact_card
from tether_brain.context.fitting import estimate
from tether_brain.context.offering import DEFAULT_KEYWORDS, compact_offer
from tether_brain.context.prompting import build_request
from tether_brain.context.prompts import COMPACT_SYSTEM, after_results
from tether_brain.skills import FolderSkillStore, load_skill_descriptor
from tether_brain.state.run import Limits, RunState
from tether_brain.tools.helpers import DESCRIPTOR as RUN_AGENT
from tether_common.messages.gateway import (
    CallRecord,
    ChatMessage,
    GenerateRequest,
    OfferedToolSpec,
)
from tether_common.messages.profiles import PromptTier
from tether_common.messages.tools import ToolDescriptor
from tether_gateway.providers.text_protocol import textual_request

SKILLS = Path(__file__).resolve().parents[2] / "skills"
BUILTINS: list[ToolDescriptor] = [*RUNNER_TOOLS, RUN_AGENT, load_skill_descriptor(None)]
SPECS = offered(BUILTINS)


def run_state(prompt: str, *, run_id: str = "run_a", step: int = 0) -> RunState:
    now = datetime.now(UTC)
    state = RunState(
        run_id=run_id,
        prompt=prompt,
        provider="local",
        model=None,
        limits=Limits(max_steps=6, max_tool_calls=10),
        created_at=now,
        updated_at=now,
        step=step,
    )
    state.messages.append(ChatMessage(role="user", content=prompt))
    return state


def request_for(
    state: RunState, tier: PromptTier, *, now: datetime | None = None
) -> GenerateRequest:
    skills = FolderSkillStore([SKILLS]).by_name().values()
    if tier == "compact":
        offered, hidden = compact_offer(SPECS, state.prompt, state.prompt, DEFAULT_KEYWORDS)
    else:
        offered, hidden = SPECS, None
    return build_request(state, offered, False, skills, hidden, tier=tier, now=now)


def names(specs: list[OfferedToolSpec]) -> set[str]:
    return {s.name for s in specs}


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("What time is it in Tokyo?", {"current_time"}),
        ("What is 9:00 in London in New York time?", {"current_time", "convert_time"}),
        ("What is 17.5% of 2,340?", {"calculate"}),
        ("Calculate the sum of 12 and 30", {"calculate"}),
        ("What port is set in config.yaml?", {"file_read"}),
        ("List the files in the docs folder", {"file_list"}),
        ("Run git status", {"shell"}),
        ("Fetch https://example.com/ and summarise it", {"web_fetch"}),
        ("Who wrote Hamlet?", set()),
    ],
)
def test_compact_offer_holds_only_what_the_request_plausibly_needs(
    prompt: str, expected: set[str]
) -> None:
    offered, _ = compact_offer(SPECS, prompt, prompt, DEFAULT_KEYWORDS)
    assert names(offered) == expected


@pytest.mark.parametrize(
    ("prompt", "first"),
    [
        # What the request asks done leads, over the tools its nouns also fit.
        ("Which file in the notes folder mentions the blue whale?", ["file_search"]),
        ("Which file under src contains a TODO comment?", ["file_search"]),
        ("List the files in the reports folder.", ["file_list"]),
        ("Create a file named hello.txt containing exactly: Hello Tether", ["file_write"]),
        ("Run the shell command `wc -l data.csv` and tell me the number of lines.", ["shell"]),
        # An edit needs the file read in the run first, so the reader comes before it.
        ("In todo.txt, replace the word milk with bread.", ["file_read", "file_edit"]),
        # Otherwise the tool the request holds a value for.
        ("What port is set in config.ini?", ["file_read"]),
        ("If it is 09:00 in London, what time is it in Tokyo?", ["convert_time"]),
    ],
)
def test_the_compact_offer_leads_with_what_the_request_asks_done(
    prompt: str, first: list[str]
) -> None:
    offered, _ = compact_offer(SPECS, prompt, prompt, DEFAULT_KEYWORDS)
    assert [s.name for s in offered][: len(first)] == first, [s.name for s in offered]


def test_retrieve_output_is_offered_when_a_result_points_at_it() -> None:
    digest = 'Output stored (2 MiB). Page it with retrieve_output {"ref": "out_1"}.'
    offered, _ = compact_offer(SPECS, "Run the tests", digest, DEFAULT_KEYWORDS)
    assert names(offered) == {"shell", "retrieve_output"}


def test_with_no_request_to_narrow_by_every_tool_is_a_card() -> None:
    offered, note = compact_offer(SPECS, None, "", DEFAULT_KEYWORDS)
    assert names(offered) == names(SPECS)
    assert note is None
    assert all("\n" not in s.description for s in offered)


def test_compact_offer_names_connector_services_left_out() -> None:
    mail = OfferedToolSpec(name="mcp.mail.search", description="Search mail.", parameters={})
    offered, note = compact_offer([*SPECS, mail], "Who wrote Hamlet?", "", DEFAULT_KEYWORDS)
    assert not offered
    assert note is not None
    assert "mail" in note
    offered, note = compact_offer([*SPECS, mail], "any unread email?", "", DEFAULT_KEYWORDS)
    assert names(offered) == {"mcp.mail.search"}
    assert note is None


@pytest.mark.parametrize("tool", BUILTINS, ids=lambda t: t.name)
def test_a_card_is_one_line_with_argument_names_and_one_example(tool: ToolDescriptor) -> None:
    card = compact_card(
        OfferedToolSpec(name=tool.name, description=tool.description, parameters=tool.parameters)
    )
    assert "\n" not in card.description
    assert card.description.count("Example: {") == 1
    assert len(card.description) < len(tool.description) or len(tool.description) < 200
    assert set(card.parameters.get("properties", {})) == set(tool.parameters["properties"])
    assert card.parameters.get("required") == tool.parameters.get("required")
    assert "description" not in str(card.parameters)


def test_the_time_card_keeps_the_descriptions_own_example() -> None:
    card = compact_card(SPECS[0])
    assert card.description == (
        'Returns the current date and time in one IANA time zone. Example: {"timezone": '
        '"Asia/Tokyo"}'
    )


@pytest.mark.parametrize(
    "prompt",
    [
        "What time is it in Tokyo?",
        "What is 17.5% of 2,340?",
        "What port is set in config.yaml?",
        "Run git status and tell me the branch",
    ],
)
def test_the_compact_prompt_is_far_smaller_than_the_full_one(prompt: str) -> None:
    full, compact = (
        request_for(run_state(prompt), "full"),
        request_for(run_state(prompt), "compact"),
    )
    native = (estimate(full.messages, full.tools), estimate(compact.messages, compact.tools))
    text = (
        estimate(textual_request(full).messages),
        estimate(textual_request(compact).messages),
    )
    figures = f"native tools {native[0]} → {native[1]}, text protocol {text[0]} → {text[1]}"
    print(f"{prompt!r}: {figures} tokens")  # noqa: T201
    assert native[1] < 0.4 * native[0]
    assert text[1] < 0.4 * text[0]
    assert compact.messages[0].content.startswith(COMPACT_SYSTEM)


def first_and_later(tier: PromptTier, later_day: int) -> tuple[GenerateRequest, GenerateRequest]:
    """The text-protocol requests of a run's first step (1 January, 09:00) and of a later
    run's fourth step (at 17:31 on `later_day`), one tool result in."""
    prompt = "What time is it in Tokyo?"
    first = run_state(prompt, run_id="run_first")
    later = run_state(prompt, run_id="run_later", step=3)
    call = CallRecord(id="c1", name="current_time", arguments={"timezone": "Asia/Tokyo"})
    later.messages += [
        ChatMessage(role="assistant", tool_calls=[call]),
        ChatMessage(role="tool", content="Tuesday 18:00", tool_call_id="c1", name="current_time"),
    ]
    one = textual_request(request_for(first, tier, now=datetime(2026, 1, 1, 9, 0, tzinfo=UTC)))
    at = datetime(2026, 1, later_day, 17, 31, tzinfo=UTC)
    return one, textual_request(request_for(later, tier, now=at))


def test_the_full_prompt_prefix_is_the_same_across_steps_runs_and_days() -> None:
    one, two = first_and_later("full", later_day=2)
    # The system prompt with its tool cards, byte for byte; then the same history so far.
    assert one.messages[0].content == two.messages[0].content
    assert one.messages[1] == two.messages[1]
    assert "2026-01-01" not in one.messages[0].content
    assert "run_first" not in one.messages[0].content
    # What changes (the date, the budget) closes the request, after the history.
    assert "2026-01-01" in one.messages[-1].content
    assert "2026-01-02" in two.messages[-1].content
    assert one.messages[-1].role == "system"


def test_the_compact_prompt_prefix_is_the_same_all_day_and_ends_with_the_history() -> None:
    one, two = first_and_later("compact", later_day=1)
    assert one.messages[0].content == two.messages[0].content
    assert one.messages[1] == two.messages[1]
    assert "run_first" not in one.messages[0].content
    # The date (no time: the same all day) ends the system prompt; no date note follows
    # the history, so the question is the last thing the model reads, and after a result
    # only the line saying to answer from it.
    assert one.messages[0].content.endswith("Today is 2026-01-01 (Thursday).")
    assert one.messages[-1] == ChatMessage(role="user", content="What time is it in Tokyo?")
    assert two.messages[-2].content.endswith("Tuesday 18:00")
    assert two.messages[-1] == ChatMessage(
        role="system", content=after_results("What time is it in Tokyo?")
    )


def test_the_last_and_finishing_notes_close_the_request() -> None:
    state = run_state("What is 2+2?", step=2)
    finishing = build_request(state, [], False, [], tier="compact", finishing=True)
    assert finishing.messages[-1].content.endswith("The question: What is 2+2?")
    assert "Tools are switched off" in finishing.messages[-1].content
    state.step = 5
    last = build_request(state, [], True, [], tier="compact")
    assert "This is your last step" in last.messages[-1].content
