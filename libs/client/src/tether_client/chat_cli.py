"""`tether chat`: a conversation with an agent on a thread, in the terminal.

Each line you type is the thread's next message (a run with the thread's history); the
answer is shown as the model writes it (live `delta` text), tool calls and results as
one line each, and a call that waits for approval as the card `tether run` shows, asked
inline (an operator token is needed to decide). `/exit` or Ctrl-D ends (exit 0 unless a
turn failed; a turn you stopped did not); Ctrl-C during a turn asks whether to stop the
run. With standard input not a terminal (`echo question | tether chat`), each line is a
turn, only the answers go to standard output (tool lines to standard error) and nothing
is asked: a parked call waits for an operator elsewhere (the commands that decide it are
said). A system that goes away mid-chat (restarted, `tether up` stopped) is waited for:
a turn posted while nothing answers is sent once it is back, and a turn's stream is
resumed, each for `RECONNECT_FOR_S`.

The terminal is read on the main thread between turns and approvals, never while a turn
streams, so Ctrl-C has one meaning at a time; each turn runs on one event loop
(`asyncio.Runner`) that the client's connections share.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from typing import Annotated

import httpx
import typer
from rich.text import Text

from tether_client.client import TetherClient
from tether_client.console import err, safe, say, stdout
from tether_client.endpoints import api_url
from tether_client.exits import describe
from tether_client.interrupts import interruptible
from tether_client.ops_cli import PROMPT, card, decide_elsewhere, send_decision
from tether_client.render import render, style, typed_or_none
from tether_client.runref import short
from tether_client.runs_cli import status_now
from tether_client.session import connect, operator_token, report
from tether_common.errors import MessageError
from tether_common.messages.deltas import RunDelta
from tether_common.messages.events import RunEndEvent, ToolApprovalNeededEvent
from tether_common.messages.runs import TERMINAL_STATUSES, RunEvent
from tether_common.messages.threads import ThreadTurnAccepted, ThreadView

__all__ = ["chat_command"]

EXIT_WORDS = frozenset({"/exit", "/quit"})
LINE_CHARS = 200  # a tool line is cut here: the run's events hold the whole of it
# How long the system is waited for when it went away (a `tether up` restarted on this
# machine takes up to a minute or two).
RECONNECT_FOR_S = 300.0
RETRY_S = 1.0


@dataclass(slots=True)
class TurnView:
    """What one turn has shown so far; kept outside the stream, so a stream cancelled by
    Ctrl-C or dropped by the network resumes after `last`."""

    run_id: str
    last: int = 0  # the last durable event seen
    streamed: dict[int, str] = field(default_factory=dict)  # live text per step
    open_line: bool = False  # text written without its newline yet
    end: RunEndEvent | None = None
    asked: ToolApprovalNeededEvent | None = None
    stopped_here: bool = False  # the person at this chat stopped it (Ctrl-C, then y)

    @property
    def failed(self) -> bool:
        """It ended other than completed, and not because it was stopped here."""
        assert self.end is not None
        status = self.end.data.status
        return status != "completed" and not (self.stopped_here and status == "stopped")


class Chat:
    """One thread's conversation; `interactive` when a person is at the terminal."""

    def __init__(self, runner: asyncio.Runner, client: TetherClient, thread: ThreadView) -> None:
        self.runner = runner
        self.client = client
        self.thread = thread
        self.interactive = sys.stdin.isatty()
        self.token = operator_token() if self.interactive else None
        self.unreachable = False  # the last post found nothing at the address

    def greet(self) -> None:
        if not self.interactive:
            return
        thread = self.thread
        model = f" · {thread.provider or 'default provider'} {thread.model or ''}".rstrip()
        said = f"thread {thread.thread_id} · agent {thread.agent or 'default'}"
        say(said + (model if thread.provider or thread.model else ""), "bold")
        if thread.turns:
            last = thread.turns[-1]
            say(f"{len(thread.turns)} turn(s) so far; the last: {last.text}", "dim")
            if last.answer:
                say(last.answer)
        say("/exit or Ctrl-D ends; Ctrl-C during a turn asks whether to stop it", "dim")

    def loop(self) -> int:
        """Turns until `/exit` or end of input: 0 unless a turn failed (one stopped here
        did not), else 1."""
        failed = False
        while (text := self.read()) is not None:
            if text:
                failed = self.turn(text) or failed
        if self.interactive:
            say(f"thread {self.thread.thread_id}: tether chat --thread {self.thread.thread_id}")
        return 1 if failed else 0

    def read(self) -> str | None:
        """The next message, or None at the end (Ctrl-D, `/exit`, end of input)."""
        try:
            line = input("you> ") if self.interactive else sys.stdin.readline()
        except EOFError:
            return None
        if not self.interactive and not line:
            return None
        text = line.strip()
        return None if text in EXIT_WORDS else text

    def turn(self, text: str) -> bool:
        """Send one message and show its run to the end; True when the turn failed."""
        try:
            accepted = self.runner.run(interruptible(self.send(text)))
        except KeyboardInterrupt:
            if not self.unreachable:
                raise  # not waiting: the chat ends, as at the prompt
            self.unreachable = False
            err("stopped waiting: that message was not sent", "dim")
            return False
        view = TurnView(accepted.run_id)
        while view.end is None:
            try:
                self.runner.run(interruptible(self.follow(view)))
            except KeyboardInterrupt:
                self.close_line(view)
                if self.confirm(f"stop run {short(view.run_id)}? [y/N] "):
                    self.runner.run(self.client.stop_run(view.run_id))
                    view.stopped_here = True
                continue
            if view.asked is not None:
                self.decide(view.asked)
                view.asked = None
        self.close_line(view)
        return view.failed

    async def send(self, text: str) -> ThreadTurnAccepted:
        """Post the message; while nothing answers at the address (the system is down or
        restarting) wait for it. Only a connection never made is tried again, so a
        message the brain may have taken is never posted twice."""
        waiting_since: float | None = None
        while True:
            try:
                accepted = await self.client.send_message(self.thread.thread_id, text)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                self.unreachable = True
                if waiting_since is None:
                    err(
                        f"cannot reach Tether at {api_url()}: waiting for it to come back "
                        "(Ctrl-C drops this message)",
                        "yellow",
                    )
                    waiting_since = time.monotonic()
                elif time.monotonic() - waiting_since > RECONNECT_FOR_S:
                    raise
            else:
                self.unreachable = False
                return accepted
            await asyncio.sleep(RETRY_S)

    async def follow(self, view: TurnView) -> None:
        """Show the run's events and text after `view.last`, until its end or a call that
        asks this operator (`view.asked`); a dropped stream is resumed."""
        dropped_at: float | None = None
        while True:
            try:
                async for item in self.client.live(view.run_id, after=view.last):
                    dropped_at = None
                    if isinstance(item, RunDelta):
                        self.write(view, item)
                    elif self.show(view, item):
                        return
            except httpx.TransportError:
                pass
            if await status_now(self.client, view.run_id) in TERMINAL_STATUSES:
                continue  # its end comes from the journal on the next read
            if dropped_at is None:  # said once, so a wait never looks like a hang
                self.close_line(view)
                err(f"the event stream of {short(view.run_id)} dropped; reconnecting", "dim")
            dropped_at = dropped_at or time.monotonic()
            if time.monotonic() - dropped_at > RECONNECT_FOR_S:
                raise httpx.ConnectError(f"the event stream of {view.run_id} stayed down")
            await asyncio.sleep(RETRY_S)

    def write(self, view: TurnView, delta: RunDelta) -> None:
        """Live text, as it comes (a sub-agent's is not the answer: not shown); what the
        terminal already has of the step is not written again (a stream resumed after
        Ctrl-C or a drop starts with the step's text so far)."""
        if delta.depth or not (text := unseen(view.streamed.get(delta.step, ""), delta)):
            return
        view.streamed[delta.step] = view.streamed.get(delta.step, "") + text
        self.put(view, text)

    def put(self, view: TurnView, text: str) -> None:
        stdout().print(Text(safe(text)), end="")
        sys.stdout.flush()
        view.open_line = not text.endswith("\n")

    def show(self, view: TurnView, event: RunEvent) -> bool:
        """One durable event; True when the stream should stop here (an end, an ask)."""
        view.last = event.seq
        read = typed_or_none(event)
        if isinstance(read, RunEndEvent):
            self.finish(view, read)
            return True
        if isinstance(read, ToolApprovalNeededEvent) and self.token is not None:
            view.asked = read
            return True
        if event.kind in ("run.start", "step", "usage") or (line := render(event)) is None:
            return False
        self.close_line(view)
        first = line.partition("\n")[0]
        cut = first if len(first) <= LINE_CHARS else first[:LINE_CHARS] + " …"
        (say if self.interactive else err)(cut, style(event))
        if isinstance(read, ToolApprovalNeededEvent):  # nobody here may decide it
            decide_elsewhere(read.data.model_dump(mode="json"), view.run_id)
        return False

    def finish(self, view: TurnView, end: RunEndEvent) -> None:
        """The answer, unless its text was already shown live (what the live text fell
        short of, when it showed a start of it); the status if not done."""
        view.end = end
        answer = end.data.answer or ""
        shown = max(view.streamed.items(), default=(0, ""))[1]
        if (rest := rest_of(answer, shown)) is None:
            self.close_line(view)
            say(answer)
        elif rest.strip():
            self.put(view, rest)
        self.close_line(view)
        if end.data.status != "completed":
            reason = f" ({end.data.stop_reason})" if end.data.stop_reason else ""
            err(f"■ {end.data.status}{reason}", "bold red")

    def decide(self, asked: ToolApprovalNeededEvent) -> None:
        """The approval card, asked here; the answer is sent as this operator's decision."""
        data = asked.data.model_dump(mode="json")
        say(card(data), "bold yellow")
        try:
            answer = input(PROMPT)
        except EOFError:
            answer = ""
        assert self.token is not None
        self.runner.run(send_decision(data, answer, self.token, "decided in tether chat"))

    def close_line(self, view: TurnView) -> None:
        if view.open_line:
            say("")
            view.open_line = False

    def confirm(self, question: str) -> bool:
        if not self.interactive:
            return True  # nobody to ask: an interrupt stops the run
        try:
            return input(question).strip().lower() in ("y", "yes")
        except EOFError:
            return False


def rest_of(answer: str, shown: str) -> str | None:
    """What to write after the live text `shown` for the answer to read whole: the rest
    when `shown` is a start of it ("" when all of it), None when it must be said anew."""
    if shown and answer.startswith(shown):
        return answer[len(shown) :]
    return "" if answer.strip() == shown.strip() else None


def unseen(shown: str, delta: RunDelta) -> str:
    """The part of `delta`'s text past what is `shown` of its step (by its `offset`; a
    delta that does not say is all new)."""
    if delta.offset is None:
        return delta.text
    return delta.text[max(len(shown) - delta.offset, 0) :]


def chat_command(
    agent: Annotated[
        str | None, typer.Option(help="The agent to talk to (a new thread only).")
    ] = None,
    thread: Annotated[
        str | None, typer.Option(help="Resume this thread instead of starting one.")
    ] = None,
    title: Annotated[str | None, typer.Option(help="A new thread's title.")] = None,
    provider: Annotated[
        str | None,
        typer.Option(help="Model provider of a new thread's turns (e.g. rules, local)."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name at that provider.")] = None,
) -> None:
    """Talk to an agent: each line is a turn of a thread (history kept), the answer
    streams as it is written, and calls that need approval are asked inline. `/exit`
    or Ctrl-D ends; Ctrl-C during a turn asks whether to stop it. A thread keeps the
    provider and model it was started with.

    Example: tether chat --agent default; tether chat --provider local --model qwen2.5:0.5b;
    echo "what time is it in Tokyo?" | tether chat
    """
    code = 0
    with asyncio.Runner() as runner:
        client = connect()
        try:
            start = NewThread(agent, title, provider, model)
            view = runner.run(_thread(client, start, thread))
            chat = Chat(runner, client, view)
            chat.greet()
            code = chat.loop()
        except KeyboardInterrupt:  # at the prompt: the chat ends (a turn asks first)
            code = 130
        except Exception as exc:
            failure = describe(exc, api_url())
            if failure is None:
                raise  # a bug: its traceback is the useful report
            report(failure)
        finally:
            runner.run(client.close())
    raise typer.Exit(code)


@dataclass(frozen=True, slots=True)
class NewThread:
    """What `tether chat` was asked to start a thread with (None: the brain's choice)."""

    agent: str | None
    title: str | None
    provider: str | None
    model: str | None


async def _thread(client: TetherClient, start: NewThread, thread_id: str | None) -> ThreadView:
    if thread_id is None:
        return await client.create_thread(
            agent=start.agent, title=start.title, provider=start.provider, model=start.model
        )
    found = await client.get_thread(thread_id)
    # A resumed thread keeps what it was started with: a different ask is refused, never
    # silently ignored.
    asked = {"agent": start.agent, "provider": start.provider, "model": start.model}
    differ = [f"--{k} {v} (it has {getattr(found, k)})" for k, v in asked.items()
              if v is not None and v != getattr(found, k)]  # fmt: skip
    if differ:
        raise MessageError(
            f"thread {found.thread_id} keeps the agent, provider and model it was started "
            f"with: {'; '.join(differ)}; start a new thread (without --thread) for them",
            code="invalid_request",
        )
    return found
