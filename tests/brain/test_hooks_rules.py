"""Lifecycle hooks in the loop, in process (`tether_brain.testing`): what each point may
do to a run, and that a rewritten call meets every gate again (so no hook widens what
the gates allow). The hook itself is a function here, standing for the tenant's service;
the transports (NATS, HTTPS, built-ins) are tested in test_hooks_calling.py, and the
whole path through the real services in test_hooks.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from builtin_tools import RUNNER_TOOLS
from tether_brain.context.prompts import STEP_LIMIT_ANSWER
from tether_brain.hooks import Failed, Hooks, StoredHook, run_builtin
from tether_brain.hooks.calling import Answer
from tether_brain.hooks.points import WITHHELD_REF
from tether_brain.loop.dispatch import MAX_TAKEOVERS
from tether_brain.state.control import Control
from tether_brain.testing import Harness, LocalRunner, MemoryEvents, MemoryHooks
from tether_brain.testing.events import Kept
from tether_common import audit
from tether_common.messages.hooks import HookReply, HookRequest, HookSpec
from tether_common.messages.tools import ExecuteTool, ToolResult
from tether_common.testing import call, say

SECRET = "sk-live-" + "Q7x9" * 8  # an OpenAI-style key planted in a tool's output

Reply = Callable[[HookRequest], HookReply | Failed]
REF = "out_" + "5e" * 16  # the ref of a large output the runner stored whole
BIG = (  # the digest the model would read of it, naming the ref as digests do
    f"[{REF}: 90000 bytes, 2000 lines; the merger file]\nOPENAI_KEY = {SECRET}\n"
    f'Page it by line: retrieve_output {{"ref": "{REF}", "offset": 0, "limit": 200}}'
)


def spec(point: str, *, failure: str = "fail_closed", **more: Any) -> HookSpec:
    return HookSpec.model_validate(
        {"name": f"h-{point}", "point": point, "transport": "nats", "target": "svc"}
        | {"failure": failure}
        | more
    )


def builtin(point: str, target: str, **options: Any) -> HookSpec:
    return HookSpec.model_validate(
        {"name": target, "point": point, "transport": "builtin", "target": target}
        | {"options": options}
    )


async def echo(request: ExecuteTool) -> ToolResult:
    """Every call answers its own arguments (so a test sees what reached the runner), and
    `file_read` of `secret.txt` answers a text with a credential in it."""
    if request.name == "file_read" and request.args.get("path") == "secret.txt":
        content = f"config:\nOPENAI_KEY = {SECRET}\nregion = eu"
    elif request.name == "file_read" and request.args.get("path") == "big.txt":
        return ToolResult(  # as the runner answers a large output it stored: a digest
            call_id=request.call_id, name=request.name, ok=True, content=BIG, output_ref=REF
        )
    else:
        content = json.dumps(request.args, sort_keys=True)
    return ToolResult(call_id=request.call_id, name=request.name, ok=True, content=content)


def harness_with(
    tmp_path: Path,
    hooks: list[HookSpec],
    reply: Reply | None = None,
    events: MemoryEvents | None = None,
) -> Harness:
    """The loop with these hooks; a `nats` hook answers by `reply`, a built-in by itself."""

    async def ask(hook: StoredHook, request: HookRequest) -> Answer:
        if hook.spec.transport == "builtin":
            return run_builtin(hook, request)
        assert reply is not None
        return reply(request)

    return Harness(
        LocalRunner(RUNNER_TOOLS, echo),
        workspace=tmp_path,
        hooks=Hooks(MemoryHooks(hooks), ask),
        events=events,
    )


def audited(harness: Harness, run_id: str, event: str) -> list[dict[str, Any]]:
    rows = harness.store.runs[run_id].audit
    found = [r for r in rows if r["event"] == event]
    return [json.loads(r["data"]) if isinstance(r["data"], str) else r["data"] for r in found]


def rewrite(arguments: dict[str, Any]) -> Reply:
    return lambda _request: HookReply(action="rewrite", arguments=arguments)


async def test_a_rewritten_call_is_gated_again_and_both_calls_are_audited(
    tmp_path: Path,
) -> None:
    original, rewritten = {"command": "rm -rf build"}, {"command": "rm -rf build/tmp"}
    harness = harness_with(tmp_path, [spec("before_tool")], rewrite(rewritten))
    sent = call("shell", **original)
    run = await harness.run([[sent], say("done")], interactive=True)
    decisions = [
        d for d in audited(harness, run.state.run_id, "gate.decision") if d["tool"] == "shell"
    ]
    assert [d["args"] for d in decisions] == [audit.redact(original), audit.redact(rewritten)]
    (said,) = audited(harness, run.state.run_id, "hook.rewrote")
    events = [r["event"] for r in harness.store.runs[run.state.run_id].audit]
    assert events[:3] == ["gate.decision", "hook.rewrote", "gate.decision"]
    assert (said["before"], said["after"]) == (audit.redact(original), audit.redact(rewritten))
    assert said["call_id"] == sent["id"]
    # Whatever the gates made of it, only the rewritten call ever reached the runner.
    assert all(r.args == rewritten for r in harness.runner.sent if r.name == "shell")


async def test_a_rewrite_runs_the_rewritten_call(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, [spec("before_tool")], rewrite({"expression": "6*7"}))
    run = await harness.run([[call("calculate", expression="1+1")], say("done")])
    (result,) = run.data("tool.result")
    assert result["ok"]
    assert json.loads(result["content"]) == {"expression": "6*7"}


@pytest.mark.parametrize(
    ("tool", "allowed", "widened", "code"),
    [
        ("file_read", {"path": "notes.txt"}, {"path": "../../etc/passwd"}, "path_denied"),
        ("file_read", {"path": "notes.txt"}, {"path": "/etc/shadow"}, "path_denied"),
        ("file_read", {"path": "notes.txt"}, {"path": ".env"}, None),
        ("calculate", {"expression": "1"}, {"expression": 7}, None),
        ("calculate", {"expression": "1"}, {"expression": "1", "extra": "x"}, None),
    ],
    ids=["escape", "absolute", "protected", "wrong-type", "unknown-field"],
)
async def test_a_rewrite_never_widens(
    tmp_path: Path, tool: str, allowed: dict[str, Any], widened: dict[str, Any], code: str | None
) -> None:
    """A call the gates allow, rewritten into one they refuse, is refused: validation and
    the permission chain judge the rewrite, not the original."""
    harness = harness_with(tmp_path, [spec("before_tool")], rewrite(widened))
    run = await harness.run([[call(tool, **allowed)], say("done")])
    (result,) = run.data("tool.result")
    assert not result["ok"], result
    if code is not None:
        assert result["error_code"] == code
    assert not [r for r in harness.runner.sent if r.name == tool]


async def test_a_deny_reaches_the_model_with_its_reason(tmp_path: Path) -> None:
    reply = HookReply(action="deny", reason="no clocks on Sundays")
    harness = harness_with(tmp_path, [spec("before_tool")], lambda _r: reply)
    run = await harness.run([[call("current_time", timezone="UTC")], say("ok")])
    (result,) = run.data("tool.result")
    assert (result["error_code"], result["content"].endswith("no clocks on Sundays")) == (
        "hook_denied",
        True,
    )
    tool_message = next(m for m in harness.model.requests[1].messages if m.role == "tool")
    assert "no clocks on Sundays" in tool_message.content
    assert not harness.runner.sent


async def test_a_hook_of_other_tools_is_not_asked(tmp_path: Path) -> None:
    asked: list[str] = []

    def reply(request: HookRequest) -> HookReply:
        asked.append(request.call.name if request.call else "")
        return HookReply(action="deny")

    harness = harness_with(tmp_path, [spec("before_tool", tools=["shell", "file_*"])], reply)
    run = await harness.run([[call("calculate", expression="2")], say("ok")])
    assert run.data("tool.result")[0]["ok"]
    assert asked == []


@pytest.mark.parametrize("reason", ["timeout", "unreachable", "malformed", "wrong_shape"])
@pytest.mark.parametrize("failure", ["fail_closed", "fail_open"])
async def test_a_failed_hook_is_read_by_its_failure_mode(
    tmp_path: Path, reason: str, failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    hook = spec("before_tool", failure=failure)
    harness = harness_with(tmp_path, [hook], lambda _r: Failed(reason, "it broke"))
    run = await harness.run([[call("calculate", expression="2")], say("ok")])
    (result,) = run.data("tool.result")
    if failure == "fail_closed":
        assert (result["ok"], result["error_code"]) == (False, "hook_failed")
        assert not harness.runner.sent
    else:
        assert result["ok"]
        assert len(harness.runner.sent) == 1
    (failed,) = audited(harness, run.state.run_id, "hook.failed")
    assert (failed["reason"], failed["mode"]) == (reason, failure)
    assert any(
        f"hook {hook.name} (nats) at before_tool failed" in r.getMessage()
        and reason in r.getMessage()
        for r in caplog.records
    )
    assert {"kind": "hook", "name": hook.name, "trigger": "before_tool", "code": reason} in [
        {k: g.get(k) for k in ("kind", "name", "trigger", "code")} for g in run.data("guard")
    ]


async def test_the_secret_redaction_hook_keeps_a_secret_from_the_model_and_the_events(
    tmp_path: Path,
) -> None:
    harness = harness_with(tmp_path, [builtin("after_tool", "redact_secrets")])
    # The second turn's request must not hold the secret, or the model answers an error.
    turns = [[call("file_read", path="secret.txt")], [{"absent": SECRET}, *say("done")]]
    run = await harness.run(turns)
    assert (run.state.status, run.state.answer) == ("completed", "done")
    (result,) = run.data("tool.result")
    assert "[redacted:api_key]" in result["content"]
    assert "region = eu" in result["content"]
    assert SECRET not in json.dumps([e.model_dump(mode="json") for e in run.events])
    assert all(SECRET not in m.content for r in harness.model.requests for m in r.messages)


async def test_without_the_hook_the_secret_reaches_the_model(tmp_path: Path) -> None:
    """The `absent` assertion the redaction test leans on does fail when the secret is
    there (so that test could fail)."""
    harness = harness_with(tmp_path, [])
    turns = [[call("file_read", path="secret.txt")], [{"absent": SECRET}, *say("done")]]
    run = await harness.run(turns)
    assert run.state.status == "failed"
    assert "said absent" in (run.state.stop_reason or "")


async def test_after_tool_taint_raises_the_bar(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, [spec("after_tool")], lambda _r: HookReply(action="taint"))
    run = await harness.run([[call("calculate", expression="2")], say("ok")])
    assert run.state.counters.tainted
    assert audited(harness, run.state.run_id, "hook.tainted")


async def test_a_failed_after_tool_hook_withholds_the_result(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, [spec("after_tool")], lambda _r: Failed("timeout", "slow"))
    run = await harness.run([[call("calculate", expression="2")], say("ok")])
    (result,) = run.data("tool.result")
    assert (result["ok"], result["error_code"]) == (False, "hook_failed")
    assert "withheld" in result["content"]


@pytest.mark.parametrize(
    ("reply", "status", "answer"),
    [
        (HookReply(action="block", reason="off topic"), "failed", None),
        (HookReply(action="replace", answer="[checked] hello"), "completed", "[checked] hello"),
        (HookReply(), "completed", "hello"),
        (Failed("timeout", "slow"), "failed", None),
    ],
    ids=["block", "replace", "allow", "fail-closed"],
)
async def test_before_answer(
    tmp_path: Path, reply: HookReply | Failed, status: str, answer: str | None
) -> None:
    harness = harness_with(tmp_path, [spec("before_answer")], lambda _r: reply)
    run = await harness.run([say("hello")])
    assert (run.state.status, run.state.answer) == (status, answer)
    if status == "failed":
        assert (run.state.stop_reason or "").startswith("answer_blocked")


async def test_deny_topics_blocks_an_answer_that_mentions_one(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, [builtin("before_answer", "deny_topics", topics=["merger"])])
    run = await harness.run([say("The Merger closes on Friday.")])
    assert run.state.status == "failed"
    assert "merger" in (run.state.stop_reason or "")


async def test_on_run_end_is_told_without_holding_the_run(tmp_path: Path) -> None:
    told: list[HookRequest] = []
    gate = asyncio.Event()

    def reply(request: HookRequest) -> HookReply:
        told.append(request)
        gate.set()
        return HookReply()

    harness = harness_with(tmp_path, [spec("on_run_end")], reply)
    run = await harness.run([say("hello")])
    await asyncio.wait_for(gate.wait(), 5)
    assert [(t.run_id, t.status) for t in told] == [(run.state.run_id, "completed")]


# ---- live text, answers at every ending, run-end notices, stored originals -------------


@pytest.mark.parametrize(
    ("hooks", "live"),
    [
        ([], True),
        ([spec("after_tool")], True),
        ([spec("on_run_end")], True),
        ([spec("before_answer")], False),
        ([builtin("before_answer", "redact_secrets")], False),
    ],
    ids=["none", "after_tool", "on_run_end", "before_answer", "builtin-before_answer"],
)
async def test_a_run_with_before_answer_hooks_streams_no_live_text(
    tmp_path: Path, hooks: list[HookSpec], live: bool
) -> None:
    """Whether a turn is the answer is known only at its end: a run whose answers a hook
    judges writes no turn's text live, so no follower reads one before the hook."""
    harness = harness_with(tmp_path, hooks, lambda _r: HookReply())
    run = await harness.run([[call("calculate", expression="2")], say("hello")])
    assert run.state.status == "completed"
    assert len(harness.model.lives) == 2
    assert all((target is not None) == live for target in harness.model.lives)


@pytest.mark.parametrize(
    ("reply", "status", "reason", "answer"),
    [
        (HookReply(action="block", reason="no"), "failed", "answer_blocked: no", None),
        (HookReply(action="replace", answer="[checked]"), "stopped", "max_steps", "[checked]"),
    ],
    ids=["block", "replace"],
)
@pytest.mark.parametrize("ending", ["step_limit", "guide_only_last_step"])
async def test_an_answer_a_run_ends_with_at_its_limit_is_judged_too(
    tmp_path: Path,
    ending: str,
    reply: HookReply,
    status: str,
    reason: str,
    answer: str | None,
) -> None:
    """Not only an answer the loop accepts: the step limit's answer and a guide-only
    run's last text meet the same `before_answer` hooks."""
    asked: list[str | None] = []

    def judge(request: HookRequest) -> HookReply:
        asked.append(request.answer)
        return reply

    harness = harness_with(tmp_path, [spec("before_answer")], judge)
    if ending == "step_limit":  # a last step that neither answers nor calls
        turns = [[{"kind": "done", "finish_reason": "unusable_call"}]]
        run = await harness.run(turns, max_steps=1)
        said = STEP_LIMIT_ANSWER
    else:
        said = "The merger closes on Friday."
        turns = [[{"kind": "chunk", "text": said}, call("current_time", timezone="UTC")]]
        run = await harness.run(turns, guide_only=True, max_steps=1)
    assert asked == [said]
    assert (run.state.status, run.state.stop_reason, run.state.answer) == (status, reason, answer)
    (end,) = run.data("run.end")
    assert end["answer"] == answer
    # Neither a step nor the end carries the text the hook judged.
    assert said not in json.dumps([e.model_dump(mode="json") for e in run.events])


def notices(told: list[HookRequest]) -> Reply:
    """`on_run_end` requests kept in `told`; every other point allows."""

    def reply(request: HookRequest) -> HookReply:
        if request.point == "on_run_end":
            told.append(request)
        return HookReply()

    return reply


async def test_an_end_whose_commit_failed_tells_no_one_and_the_end_that_commits_once(
    tmp_path: Path,
) -> None:
    """Another replica takes the run while its answer is judged: this replica's end does
    not commit, so it tells nothing; the replica that ends it tells once."""
    told: list[HookRequest] = []
    taken: list[str] = []

    def reply(request: HookRequest) -> HookReply | Failed:
        if request.point == "before_answer" and not taken:
            taken.append(request.run_id)
            harness.store.runs[request.run_id].row["fence"] += 1  # claimed elsewhere
        return notices(told)(request)

    harness = harness_with(tmp_path, [spec("before_answer"), spec("on_run_end")], reply)
    first = await harness.run([say("hello")])
    assert first.state.status == "running"  # its end was refused: the lease had gone
    assert harness.hooks is not None
    await harness.hooks.close()
    assert told == []
    again = await harness.advance(await harness._claim(first.state.run_id))
    assert again.state.status == "completed"
    await harness.hooks.close()
    assert [(t.run_id, t.status) for t in told] == [(first.state.run_id, "completed")]


class StalledEnds(MemoryEvents):
    """A bus on which a run's end is never published: the run's task is still in its end
    when it is cancelled (a fence, a shutdown), after the end committed."""

    def __init__(self) -> None:
        super().__init__()
        self.stalled = asyncio.Event()

    async def js_send_many(self, items: Any) -> Kept:
        if any(b'"run.end"' in body for _, body, _ in items):
            self.stalled.set()
            await asyncio.Event().wait()
        return await super().js_send_many(items)


async def test_an_end_committed_is_told_even_if_its_task_is_cancelled_after(
    tmp_path: Path,
) -> None:
    told: list[HookRequest] = []
    events = StalledEnds()
    harness = harness_with(tmp_path, [spec("on_run_end")], notices(told), events)
    task = asyncio.create_task(harness.run([say("hello")]))
    await asyncio.wait_for(events.stalled.wait(), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert harness.hooks is not None
    await harness.hooks.close()
    assert [t.status for t in told] == ["completed"]


@pytest.mark.parametrize("ending", ["stopped_while_parked", "killed_while_parked", "crashed"])
async def test_every_end_outside_an_answer_tells_on_run_end_once(
    tmp_path: Path, ending: str
) -> None:
    """A run stopped or killed while it waits for an operator, and one taken over too
    often, end through the same commit as any other: the notice is told once each."""
    told: list[HookRequest] = []
    harness = harness_with(tmp_path, [spec("on_run_end")], notices(told))
    if ending == "crashed":
        state = harness.prepare(harness.model.add([say("never")]), "do the task")
        state.status, state.takeovers = "running", MAX_TAKEOVERS + 1
        await harness.store.create(state, owner="in-process", lease_s=3600.0)
        run = await harness.advance(state)
        expected = ("failed", "repeated_crash")
    else:
        parked = await harness.run([[call("shell", command="rm -rf build")]], interactive=True)
        assert parked.state.status == "awaiting_approval"
        control = Control()
        control.halt("stop_requested" if ending == "stopped_while_parked" else "killed")
        run = await harness.advance(await harness._claim(parked.state.run_id), control=control)
        expected = ("stopped", "stop_requested" if ending == "stopped_while_parked" else "killed")
    assert (run.state.status, run.state.stop_reason) == expected
    assert harness.hooks is not None
    await harness.hooks.close()
    harness.hooks.run_ended(run.state)  # told again by mistake: still once
    await harness.hooks.close()
    assert [(t.run_id, t.status, t.stop_reason) for t in told] == [(run.state.run_id, *expected)]


@pytest.mark.parametrize(
    ("hook", "reply"),
    [
        (builtin("after_tool", "redact_secrets", tools=["file_*"]), None),
        (spec("after_tool", tools=["file_read"]), "own-redaction"),
        (builtin("after_tool", "deny_topics", topics=["merger"]), None),
        (spec("after_tool"), "fails-closed"),
    ],
    ids=["redact_secrets", "a-service-keeping-the-ref", "deny_topics", "fail-closed"],
)
async def test_a_hooked_results_stored_original_cannot_be_read_back_by_the_run(
    tmp_path: Path, hook: HookSpec, reply: str | None
) -> None:
    """A large result the runner stored whole is named by its ref in the digest the model
    reads: a hook that changes the result strikes the ref, so `retrieve_output` cannot
    page the original back, whichever tools the hook covers (here never
    `retrieve_output`). The ref stays in the operators' audit record."""

    def answer(request: HookRequest) -> HookReply | Failed:
        if reply == "fails-closed":
            return Failed("timeout", "slow")
        text = (request.result or "").replace(SECRET, "[redacted]")
        return HookReply(action="redact", content=text)

    harness = harness_with(tmp_path, [hook.model_copy(update={"name": "h"})], answer)
    # The model's second request must hold neither the ref nor the secret.
    turns = [[call("file_read", path="big.txt")], [{"absent": REF}, {"absent": SECRET}, *say("ok")]]
    run = await harness.run(turns)
    assert (run.state.status, run.state.answer) == ("completed", "ok"), run.state.stop_reason
    (result,) = run.data("tool.result")
    assert result.get("output_ref") is None
    if reply != "fails-closed" and hook.target != "deny_topics":
        assert WITHHELD_REF in result["content"]
        assert "retrieve_output cannot read it" in result["content"]
    assert REF not in json.dumps([e.model_dump(mode="json") for e in run.events])
    (kept,) = audited(harness, run.state.run_id, "hook.original")
    assert kept["stored_ref"] == REF  # for an operator, who reads every run's outputs


async def test_a_result_a_hook_only_taints_keeps_its_ref(tmp_path: Path) -> None:
    """The ref is struck only from results a hook changed: a tainted one is read whole."""
    harness = harness_with(tmp_path, [spec("after_tool")], lambda _r: HookReply(action="taint"))
    turns = [[call("file_read", path="big.txt")], [{"present": REF}, *say("ok")]]
    run = await harness.run(turns)
    assert run.state.status == "completed", run.state.stop_reason
    assert run.data("tool.result")[0]["output_ref"] == REF
