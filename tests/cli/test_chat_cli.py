"""`tether chat` as a person uses it, on a terminal (a pty) against the real services: two
turns of one thread, the first parking a call that is approved inline; the answer shown
once, as it was written; then the same thread resumed with a question on a pipe, whose
answer alone goes to standard output; then resumed on the terminal again, a turn's live
text shown while the model still writes, and Ctrl-C during it stopping the run (Ctrl-D
then exits 0). A chat follows a turn only after posting it, so the model may already have
written: a reader that joins late is given the text so far (CI once saw the chat sit
silent there). A chat on a thread of its own provider and model outlives a brain that
went away between two turns."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import aclosing
from pathlib import Path

import pytest

from shipped import observe
from tether_client.client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.messages.deltas import RunDelta
from tether_common.subjects import Subjects
from tether_common.testing import call, until_sync

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TETHER = Path(sys.executable).parent / "tether"
OPERATOR_TOKEN = "test-operator-token"  # tests/conftest.py: the stack's admin token
SCRIPT = "chatscript"  # the brain's configured model: every thread's runs use it
CONFIRMED_TOOL = "convert_time"
CONVERT = {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"}
FIRST_ANSWER = "It is 18:00 in Tokyo."
SECOND_ANSWER = "Yes, still 18:00."
PIPED_ANSWER = "Third time: 18:00."
BEGUN = "Let me think"  # a turn that then waits: only live text can show this
LATE_SCRIPT = "latescript"  # one turn: a few words at once, then a long wait
LATE_TEXT = "Written before anyone listened."
AWAY_SCRIPT = "awayscript"  # a thread's own model: two turns around a brain restart
BEFORE_ANSWER = "Hello before the restart."
AFTER_ANSWER = "Back after the restart."
WAIT_S = 120.0
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def slowly(text: str) -> list[dict[str, object]]:
    """A turn that writes `text` word by word, a little apart (live text to stream)."""
    words = text.split(" ")
    turn: list[dict[str, object]] = []
    for index, word in enumerate(words):
        turn.append({"kind": "chunk", "text": word + (" " if index < len(words) - 1 else "")})
        turn.append({"pause_s": 0.05})
    return turn


@pytest.fixture(scope="module")
def stack_extra_env(scripts_dir: Path) -> dict[str, str]:
    # Turns are chosen by the number of assistant messages a request holds, and a
    # thread's runs carry the earlier turns: run 1 asks and answers (turns 0-1), run 2
    # answers (turn 2), run 3 answers (turn 3), run 4 begins and waits (turn 4).
    turns = [[call(CONFIRMED_TOOL, **CONVERT)], slowly(FIRST_ANSWER)]
    turns += [slowly(SECOND_ANSWER), slowly(PIPED_ANSWER)]
    turns += [[{"kind": "chunk", "text": BEGUN}, {"pause_s": 600}, *slowly("never said")]]
    (scripts_dir / f"{SCRIPT}.json").write_text(json.dumps({"turns": turns}))
    late = [{"kind": "chunk", "text": LATE_TEXT}, {"pause_s": 600}, *slowly("never said")]
    (scripts_dir / f"{LATE_SCRIPT}.json").write_text(json.dumps({"turns": [late]}))
    return {
        "TETHER_BRAIN_GUARDRAILS": json.dumps({CONFIRMED_TOOL: "confirm"}),
        "TETHER_BRAIN_PROVIDER": "scripted",
        "TETHER_BRAIN_MODEL": SCRIPT,
    }


def cli_env(stack: Supervisor, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "OTEL_"))}
    return env | {
        "TETHER_HOME": str(home),
        "TETHER_API_URL": stack.child("brain").url,
        "TETHER_APPROVALS_URL": stack.child("approvals").url,
        "TETHER_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "NO_COLOR": "1",
        "COLUMNS": "200",
    }


class Terminal:
    """A process on a pty: what it wrote so far (escapes removed), and typing."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave)
        os.close(slave)
        self.chunks: list[bytes] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:  # the process closed its side
                return
            if not data:
                return
            self.chunks.append(data)

    @property
    def text(self) -> str:
        return ANSI.sub("", b"".join(self.chunks).decode(errors="replace")).replace("\r", "")

    def wait_for(self, check: Callable[[str], bool], what: str) -> None:
        """Until the screen's text passes `check`; fails at once if the chat has exited."""

        def screen() -> str:
            text = self.text
            assert check(text) or self.proc.poll() is None or check(self.text), (
                f"exited before {what}"
            )
            return text

        until_sync(screen, done=check, timeout=WAIT_S, every=0.1, what=what)

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def end_input(self) -> None:
        """Ctrl-D at the start of a line: the end of input."""
        os.write(self.master, b"\x04")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.reader.join(timeout=5)
        os.close(self.master)


@pytest.fixture
def terminal(stack: Supervisor, tmp_path: Path) -> Iterator[Callable[..., Terminal]]:
    opened: list[Terminal] = []

    def open_(*argv: str) -> Terminal:
        opened.append(Terminal([str(TETHER), *argv], cli_env(stack, tmp_path)))
        return opened[-1]

    try:
        yield open_
    finally:
        for each in opened:
            each.close()


def test_two_turns_with_an_inline_approval_then_a_piped_question(
    stack: Supervisor, terminal: Callable[..., Terminal], tmp_path: Path
) -> None:
    assert TETHER.exists(), f"{TETHER} is missing: the tether-client entry point is not installed"
    chat = terminal("chat")
    chat.wait_for(lambda t: t.count("you> ") == 1, "the first prompt")
    chat.type("convert 9am UTC to Tokyo time")
    chat.wait_for(lambda t: "approve? [o]nce" in t, "the approval card")
    chat.type("o")
    chat.wait_for(lambda t: t.count("you> ") == 2, "the second prompt")
    chat.type("still?")
    chat.wait_for(lambda t: t.count("you> ") == 3, "the third prompt")
    chat.type("/exit")
    assert chat.proc.wait(timeout=WAIT_S) == 0, chat.text
    shown = chat.text
    thread_id = re.findall(r"tether chat --thread (thr_\S+)", shown)[-1]

    assert f"approval needed: {CONFIRMED_TOOL}" in shown
    assert f"→ {CONFIRMED_TOOL}" in shown
    assert f"← ✓ {CONFIRMED_TOOL}" in shown
    assert ": allow_once" in shown
    # Each answer once: streamed as written, not printed again at the run's end.
    assert shown.count(FIRST_ANSWER) == 1, shown
    assert shown.count(SECOND_ANSWER) == 1, shown
    assert shown.index(FIRST_ANSWER) < shown.index(SECOND_ANSWER)

    piped = subprocess.run(
        [str(TETHER), "chat", "--thread", thread_id],
        input="and a third time?\n",
        env=cli_env(stack, tmp_path),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.strip() == PIPED_ANSWER

    again = terminal("chat", "--thread", thread_id)
    again.wait_for(lambda t: "3 turn(s) so far" in t and "you> " in t, "the resumed thread")
    again.type("think it over")
    again.wait_for(lambda t: BEGUN in t, "the live text of a turn still being written")
    again.proc.send_signal(signal.SIGINT)
    again.wait_for(lambda t: "? [y/N]" in t, "the question whether to stop")
    again.type("y")
    again.wait_for(lambda t: "■ stopped" in t and t.count("you> ") == 2, "the stopped turn")
    again.end_input()
    # Issue 29 (6): this exited 1. A turn stopped here is what its person asked for.
    assert again.proc.wait(timeout=WAIT_S) == 0, again.text
    assert "never said" not in again.text


async def test_a_chat_on_another_model_waits_for_a_system_that_went_away(
    stack: Supervisor, terminal: Callable[..., Terminal], scripts_dir: Path, tmp_path: Path
) -> None:
    """Issue 29 (6): a thread on another provider or model needed raw HTTP, and when the
    system went down between turns the next turn printed `error: cannot reach…` and the
    chat exited 3. Now `--provider`/`--model` start the thread, and a turn posted while
    the brain is down is sent once it is back (once: the answer comes one time)."""
    (scripts_dir / f"{AWAY_SCRIPT}.json").write_text(
        json.dumps({"turns": [slowly(BEFORE_ANSWER), slowly(AFTER_ANSWER)]})
    )
    chat = terminal("chat", "--provider", "scripted", "--model", AWAY_SCRIPT)
    await asyncio.to_thread(chat.wait_for, lambda t: "you> " in t, "the first prompt")
    assert f"scripted {AWAY_SCRIPT}" in chat.text
    chat.type("hello")
    await asyncio.to_thread(
        chat.wait_for, lambda t: BEFORE_ANSWER in t and t.count("you> ") == 2, "the first answer"
    )
    brain = stack.child("brain")
    try:
        await stack.stop_child(brain)
        chat.type("are you back?")
        await asyncio.to_thread(chat.wait_for, lambda t: "cannot reach Tether" in t, "the wait")
        assert chat.proc.poll() is None, chat.text
    finally:
        await stack.start_child(brain)
        await stack.wait_ready(children=[brain])
    await asyncio.to_thread(
        chat.wait_for, lambda t: AFTER_ANSWER in t and t.count("you> ") == 3, "the answer after"
    )
    chat.type("/exit")
    assert await asyncio.to_thread(chat.proc.wait, WAIT_S) == 0, chat.text
    shown = chat.text
    assert "error:" not in shown
    assert shown.count(AFTER_ANSWER) == 1, shown
    thread_id = re.findall(r"tether chat --thread (thr_\S+)", shown)[-1]

    async with TetherClient(stack.child("brain").url, token=OPERATOR_TOKEN) as client:
        thread = await client.get_thread(thread_id)
    assert (thread.provider, thread.model, len(thread.turns)) == ("scripted", AWAY_SCRIPT, 2)
    refused = await asyncio.to_thread(
        subprocess.run,
        [str(TETHER), "chat", "--thread", thread_id, "--model", SCRIPT],
        input="",
        env=cli_env(stack, tmp_path),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert refused.returncode == 2, refused.stderr
    assert f"--model {SCRIPT} (it has {AWAY_SCRIPT})" in refused.stderr


async def test_a_reader_that_joins_after_the_text_was_written_is_given_it(
    stack: Supervisor,
) -> None:
    """The race `tether chat` runs every turn (post, then follow), lost on purpose: the
    reader connects only once the model's text is out and the model is waiting."""
    subjects = Subjects(stack.env["TETHER_SUBJECT_PREFIX"])
    bus = await observe(stack)
    client = TetherClient(stack.child("brain").url, token=OPERATOR_TOKEN)
    run_id = ""
    try:
        heard = await bus.subscribe_raw(subjects.run_deltas_all)  # before the run exists
        run_id = (await client.start_run("write, then wait", model=LATE_SCRIPT)).run_id
        while True:  # the text is out: nobody followed the run yet
            msg = await heard.next_msg(timeout=WAIT_S)
            if msg.subject == subjects.run_deltas(run_id):
                assert RunDelta.model_validate_json(msg.data).text == LATE_TEXT
                break
        await heard.unsubscribe()  # heard out: nothing left for the bus's drain to wait on
        try:
            shown = await asyncio.wait_for(first_text(client, run_id), WAIT_S)
        except TimeoutError:
            raise AssertionError(f"a late reader was given no live text in {WAIT_S:.0f}s") from None
        assert shown == LATE_TEXT  # whole, in one piece: the answer to its ask
    finally:
        if run_id:
            await client.stop_run(run_id)
        await client.close()
        await bus.close()


async def first_text(client: TetherClient, run_id: str) -> str:
    """The first live text a new reader of the run is given."""
    async with aclosing(client.live(run_id)) as items:
        async for item in items:
            if isinstance(item, RunDelta):
                return item.text
    raise AssertionError(f"{run_id} ended before any live text reached a reader")
