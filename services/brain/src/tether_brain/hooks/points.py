"""The four points of a run where its tenant's hooks are asked, in the order they are
defined: `before_tool` (each call the gates did not refuse), `after_tool` (each result),
`before_answer` (the answer that would end the run), `on_run_end` (a notice).

Every decision is recorded in the run's audit trail (`hook.*`: names and digests, never
values) and as a `guard` event of kind `hook` (no content). A hook that fails (`Failed`)
is logged, counted (`tether.hooks.failures`) and recorded, then read by its failure
mode: `fail_open` as an allow, `fail_closed` as a refusal at its point (the call denied,
the result withheld, the answer blocked). The original of a redacted or withheld result
is kept in the output-store under a run id no run has (`<run_id>.hooked`), so only an
operator whose `outputs.read` reaches every run downloads it, and the ref of the tool's
own stored output (a large result's) is struck from the text the model reads, so no run
reads the original back through `retrieve_output`. The model, the run's caller and the
run's events see only what the hooks let through; a run with `before_answer` hooks
streams no live text (`withhold_live_text`), so no follower reads an answer before they
judge it."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from tether_brain.hooks.book import StoredHook, TenantHooks
from tether_brain.hooks.calling import Answer, Failed
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_common import audit
from tether_common.messages.events import Guard
from tether_common.messages.gateway import CallRecord
from tether_common.messages.hooks import HookCall, HookPoint, HookReply, HookRequest
from tether_common.messages.tools import ToolResult
from tether_common.metrics import hook_failures

log = logging.getLogger(__name__)

HOOKED_SUFFIX = ".hooked"  # the output-store run id of originals kept from the model
# The outcomes of a call a hook refused (tool outcomes the model reads, not errors).
HOOK_DENIED = "hook_denied"
HOOK_FAILED = "hook_failed"
NOTICE_DRAIN_S = 5.0
# What a hooked result says in place of its stored output's ref.
WITHHELD_REF = "[ref withheld]"
WITHHELD_NOTE = (
    "[the whole output is kept for operators only: a hook changed this result, so "
    "retrieve_output cannot read it]"
)
TOLD_KEPT = 10_000  # run ids remembered as told (an end commits once; this is a second lock)


class HookSource(Protocol):
    async def of(self, tenant: str) -> TenantHooks: ...


Ask = Callable[[StoredHook, HookRequest], Awaitable[Answer]]
Keep = Callable[[str, str], Awaitable[str | None]]  # (run id, text) -> output ref


@dataclass(frozen=True, slots=True)
class CallVerdict:
    """What the hooks made of a call: allowed as it was, denied, or rewritten."""

    action: Literal["allow", "deny", "rewrite"] = "allow"
    call: CallRecord | None = None  # the rewritten call
    reason: str | None = None
    code: str | None = None  # hook_denied | hook_failed
    hooks: tuple[str, ...] = ()  # the hooks that rewrote it, in order


@dataclass(frozen=True, slots=True)
class AnswerVerdict:
    answer: str
    blocked: str | None = None  # the reason, when the answer may not stand


def _request(state: RunState, hook: StoredHook, point: HookPoint, **fields: object) -> HookRequest:
    return HookRequest.model_validate(
        {
            "hook": hook.spec.name,
            "point": point,
            "tenant": state.tenant,
            "run_id": state.run_id,
            "agent": state.options.agent,
            **fields,
        }
    )


def _without_ref(result: ToolResult, ref: str | None) -> ToolResult:
    """A result the hooks changed, without the ref of the tool's stored whole output
    (a large result's digest names it): with the ref, the run (or a run of its tree)
    would read the original back with `retrieve_output`, whatever tools the hooks cover.
    The ref is a random capability nothing else shows the run, so without it the
    original is for operators only."""
    if ref is None:
        return result
    pattern = re.compile(re.escape(ref), re.IGNORECASE)
    if not pattern.search(result.content):
        return result
    content = pattern.sub(WITHHELD_REF, result.content) + "\n" + WITHHELD_NOTE
    return result.model_copy(update={"content": content})


def _applies(hook: StoredHook, tool: str) -> bool:
    return not hook.spec.tools or any(fnmatch.fnmatchcase(tool, p) for p in hook.spec.tools)


class Hooks:
    def __init__(self, source: HookSource, ask: Ask, keep: Keep | None = None) -> None:
        self.source = source
        self.ask = ask
        self.keep = keep  # None: originals are not kept (in-process tests)
        self._notices: set[asyncio.Task[None]] = set()
        self._told: dict[str, None] = {}  # runs whose end was told here, oldest first

    async def _at(
        self, state: RunState, point: HookPoint, tool: str | None = None
    ) -> list[StoredHook]:
        hooks = (await self.source.of(state.tenant)).at(point)
        return [h for h in hooks if tool is None or _applies(h, tool)]

    async def _answer(
        self, state: RunState, hook: StoredHook, request: HookRequest
    ) -> HookReply | None:
        """The hook's reply; on a failure, an allow (`fail_open`) or None (`fail_closed`)."""
        answer = await self.ask(hook, request)
        if isinstance(answer, HookReply):
            return answer
        self._failed(state, hook, request.point, answer)
        return HookReply() if hook.spec.failure == "fail_open" else None

    def _failed(self, state: RunState, hook: StoredHook, point: HookPoint, failed: Failed) -> None:
        spec = hook.spec
        hook_failures.add(
            1,
            {
                "point": point,
                "transport": spec.transport,
                "reason": failed.reason,
                "mode": spec.failure,
            },
        )
        log.warning(
            "hook %s (%s) at %s failed for run %s: %s: %s (%s)",
            spec.name,
            spec.transport,
            point,
            state.run_id,
            failed.reason,
            failed.detail,
            spec.failure,
        )
        state.audit_later(
            "hook.failed",
            {"hook": spec.name, "point": point, "reason": failed.reason, "mode": spec.failure},
        )
        emit(
            state,
            Guard(
                step=state.step,
                kind="hook",
                name=spec.name,
                trigger=point,
                code=failed.reason,
                reason=spec.failure,
            ),
        )

    @staticmethod
    def _said(
        state: RunState, hook: StoredHook, point: HookPoint, action: str, **data: object
    ) -> None:
        state.audit_later(f"hook.{action}", {"hook": hook.spec.name, "point": point, **data})
        call_id = data.get("call_id")
        emit(
            state,
            Guard(
                step=state.step,
                kind="hook",
                name=hook.spec.name,
                trigger=point,
                reason=action,
                call_id=str(call_id) if call_id else None,
            ),
        )

    # ---- before_tool -------------------------------------------------------------------

    async def before_tool(self, state: RunState, call: CallRecord) -> CallVerdict:
        """Each hook in turn on the call as the hooks before it left it: the first deny
        (or a fail-closed failure) ends it; rewrites chain."""
        current = call
        rewriters: list[str] = []
        for hook in await self._at(state, "before_tool", call.name):
            asked = HookCall(id=current.id, name=current.name, arguments=current.arguments)
            reply = await self._answer(
                state, hook, _request(state, hook, "before_tool", call=asked)
            )
            name = hook.spec.name
            if reply is None:
                self._said(state, hook, "before_tool", "denied", call_id=call.id, tool=call.name)
                why = f"the hook '{name}' could not judge this call, so it is refused"
                return CallVerdict("deny", reason=why, code=HOOK_FAILED)
            if reply.action == "deny":
                self._said(state, hook, "before_tool", "denied", call_id=call.id, tool=call.name)
                why = reply.reason or f"refused by the hook '{name}'"
                return CallVerdict("deny", reason=why, code=HOOK_DENIED)
            if reply.action == "rewrite" and reply.arguments is not None:
                current = current.model_copy(update={"arguments": reply.arguments})
                rewriters.append(name)
        if current is call:
            return CallVerdict("allow")
        return CallVerdict("rewrite", current, hooks=tuple(rewriters))

    def rewrote(self, state: RunState, call: CallRecord, verdict: CallVerdict) -> None:
        """Record a rewrite (after the original call's gate decision, before the
        rewritten one's): the original and the rewritten arguments, as digests."""
        assert verdict.call is not None
        state.audit_later(
            "hook.rewrote",
            {
                "hooks": list(verdict.hooks),
                "point": "before_tool",
                "call_id": call.id,
                "tool": call.name,
                "before": audit.redact(call.arguments),
                "after": audit.redact(verdict.call.arguments),
            },
        )
        for name in verdict.hooks:
            emit(
                state,
                Guard(
                    step=state.step,
                    kind="hook",
                    name=name,
                    trigger="before_tool",
                    reason="rewrote",
                    call_id=call.id,
                ),
            )

    # ---- after_tool --------------------------------------------------------------------

    async def after_tool(self, state: RunState, call: CallRecord, result: ToolResult) -> ToolResult:
        """The result as the hooks let the model see it; a taint raises the run's bar."""
        seen = result
        for hook in await self._at(state, "after_tool", call.name):
            request = _request(
                state,
                hook,
                "after_tool",
                call=HookCall(id=call.id, name=call.name, arguments=call.arguments),
                result=seen.content,
                ok=seen.ok,
            )
            reply = await self._answer(state, hook, request)
            if reply is None:
                withheld = f"[withheld: the hook '{hook.spec.name}' could not check this result]"
                seen = seen.model_copy(
                    update={
                        "content": withheld,
                        "ok": False,
                        "error_code": HOOK_FAILED,
                        "output_ref": None,
                    }
                )
                self._said(state, hook, "after_tool", "withheld", call_id=call.id, tool=call.name)
                break
            if reply.action == "taint":
                state.counters.tainted = True
                self._said(state, hook, "after_tool", "tainted", call_id=call.id, tool=call.name)
            elif reply.action == "redact" and reply.content is not None:
                seen = seen.model_copy(update={"content": reply.content, "output_ref": None})
                self._said(state, hook, "after_tool", "redacted", call_id=call.id, tool=call.name)
        if seen is not result:
            kept = await self._keep(state, result)
            state.audit_later(
                "hook.original",
                {
                    "call_id": call.id,
                    "tool": call.name,
                    "output_ref": kept,
                    "stored_ref": result.output_ref,  # the tool's whole output, never shown
                },
            )
            seen = _without_ref(seen, result.output_ref)
        return seen

    async def _keep(self, state: RunState, result: ToolResult) -> str | None:
        """The original result in the output-store, for operators only (None: not kept)."""
        if self.keep is None:
            return None
        try:
            return await self.keep(state.run_id + HOOKED_SUFFIX, result.content)
        except Exception as exc:  # the model still sees only the redacted text
            log.warning(
                "run %s: the original of a hooked result was not kept: %s", state.run_id, exc
            )
            return None

    # ---- before_answer -------------------------------------------------------------------

    async def withhold_live_text(self, state: RunState) -> bool:
        """Whether the run's model text is kept from its live deltas: its tenant has a
        `before_answer` hook, which can judge an answer only once it is whole, so text
        published as it is written would reach followers before the hook could block or
        replace it. (Whether a turn is the answer is known only at its end, so no turn of
        such a run streams.) Its followers read each step's text in its durable `step`
        event, an answer only as the hooks let it stand. Hooks that cannot be read: held
        back too (the answer's check then fails by the hook's own mode)."""
        try:
            return bool(await self._at(state, "before_answer"))
        except Exception as exc:  # the safe side: no live text
            log.warning("run %s: hooks not read, live text withheld: %s", state.run_id, exc)
            return True

    async def before_answer(self, state: RunState, answer: str) -> AnswerVerdict:
        text = answer
        for hook in await self._at(state, "before_answer"):
            reply = await self._answer(
                state, hook, _request(state, hook, "before_answer", answer=text)
            )
            if reply is None:
                self._said(state, hook, "before_answer", "blocked")
                return AnswerVerdict(
                    text, f"the hook '{hook.spec.name}' could not check the answer"
                )
            if reply.action == "block":
                self._said(state, hook, "before_answer", "blocked")
                return AnswerVerdict(
                    text, reply.reason or f"blocked by the hook '{hook.spec.name}'"
                )
            if reply.action == "replace" and reply.answer is not None:
                self._said(state, hook, "before_answer", "replaced")
                text = reply.answer
        return AnswerVerdict(text)

    # ---- on_run_end ------------------------------------------------------------------------

    def run_ended(self, state: RunState) -> None:
        """Tell the tenant's `on_run_end` hooks that the run's end is committed, without
        waiting: each failure is logged and counted. Called by the one place a run's end
        is committed (`loop/completion.py`), by the replica that committed it, whatever
        ended it (an answer, a limit, a stop, a kill, a failure, a takeover gone wrong);
        an end commits once (fenced), and a run told of here is not told again. The tasks
        are held here and finished (or cancelled) by `close`."""
        if state.run_id in self._told:
            return
        self._told[state.run_id] = None
        if len(self._told) > TOLD_KEPT:
            del self._told[next(iter(self._told))]
        task = asyncio.create_task(
            self._notify(
                state.run_id, state.tenant, state.options.agent, state.status, state.stop_reason
            )
        )
        self._notices.add(task)
        task.add_done_callback(self._notices.discard)

    async def _notify(
        self, run_id: str, tenant: str, agent: str | None, status: str, reason: str | None
    ) -> None:
        try:
            hooks = (await self.source.of(tenant)).at("on_run_end")
        except Exception as exc:  # a notice never fails anything
            log.warning("run %s: on_run_end hooks not read: %s", run_id, exc)
            return
        for hook in hooks:
            request = HookRequest(
                hook=hook.spec.name,
                point="on_run_end",
                tenant=tenant,
                run_id=run_id,
                agent=agent,
                status=status,
                stop_reason=reason,
            )
            answer = await self.ask(hook, request)
            if isinstance(answer, Failed):
                hook_failures.add(
                    1,
                    {
                        "point": "on_run_end",
                        "transport": hook.spec.transport,
                        "reason": answer.reason,
                        "mode": hook.spec.failure,
                    },
                )
                log.warning(
                    "hook %s at on_run_end failed for run %s: %s: %s",
                    hook.spec.name,
                    run_id,
                    answer.reason,
                    answer.detail,
                )

    async def close(self) -> None:
        """Finish the notices in flight (at most NOTICE_DRAIN_S), then cancel the rest."""
        if not self._notices:
            return
        _done, pending = await asyncio.wait(set(self._notices), timeout=NOTICE_DRAIN_S)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
