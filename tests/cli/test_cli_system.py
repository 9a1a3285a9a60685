"""The `tether` binary against the whole system as `tether up` starts it (embedded NATS and
PostgreSQL, the five services): up's progress and summary, human service logs, status,
runs with prefixes and `last`, every output format, Ctrl-C while following, a
followed stream that survives a brain killed mid-run, and the offline planner's sums and
follow-ups in `tether chat`. Also draws the README's CLI
session from real output (`TETHER_SCREENSHOTS_DIR=docs/images` writes it there). A piped
`tether run` at an approval: the command that decides it, exit 7. Last,
`tether up` killed outright, which must take every process it started with it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import httpx
import pytest
import yaml
from rich.console import Console
from rich.text import Text

from proctree import descendants, kill_all, survivors
from tether_client.cli import main
from tether_client.client import TetherClient
from tether_common.messages.runs import RunEvent
from tether_common.testing import call, say, until_sync, write_script
from tether_common.topology import SERVICES

pytestmark = pytest.mark.e2e

TETHER = Path(sys.executable).parent / "tether"
UP_DEADLINE_S = 300.0  # the services import slowly on a loaded two-core machine
WAIT_S = 120.0  # for a line in a file the CLI writes, or an answer of the CLI
RUNNER_KEY = "brave-key-of-the-runner"


@dataclass
class System:
    home: Path
    env: dict[str, str]
    log: Path
    scripts: Path
    proc: subprocess.Popen[bytes]

    def tether(self, *argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(TETHER), *argv],
            env=self.env | extra,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def start(self, *argv: str, out: Path) -> subprocess.Popen[bytes]:
        with out.open("wb") as sink, out.with_suffix(".err").open("wb") as errors:
            return subprocess.Popen(
                [str(TETHER), *argv],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=errors,
            )

    def state(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads((self.home / "up.json").read_text())
        return found


def user_env(home: Path, scripts: Path) -> dict[str, str]:
    """A user's environment: nothing of the suite's (TETHER_TOKEN, URLs), only a home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "OTEL_"))}
    return env | {
        "TETHER_HOME": str(home),
        "TETHER_GATEWAY_SCRIPTS_DIR": str(scripts),
        "COLUMNS": "110",
        **{
            f"TETHER_{s}_HTTP_PORT": "0"
            for s in ("BRAIN", "APPROVALS", "OUTPUTS", "GATEWAY", "RUNNER")
        },
    }


@pytest.fixture(scope="module")
def system() -> Iterator[System]:
    assert TETHER.exists(), f"{TETHER} is missing: the tether-client entry point is not installed"
    # Not under pytest's private basetemp: PostgreSQL runs as another user under root.
    home = Path(tempfile.mkdtemp(prefix="tether-cli-home-"))
    scripts = home / "scripts"
    scripts.mkdir()
    # A user's own credential of one service's (the runner's search key): that service's alone.
    env = user_env(home, scripts) | {"TETHER_RUNNER_BRAVE_API_KEY": RUNNER_KEY}
    log = home / "up.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [str(TETHER), "up", "--log-format", "text"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: killed as one if it hangs at the end
        )
    found = System(home, env, log, scripts, proc)
    try:
        until_sync(
            lambda: "Ctrl-C stops everything" in log.read_text() or proc.poll() is not None,
            timeout=UP_DEADLINE_S,
            every=0.2,
            what="tether up",
        )
        assert proc.poll() is None, log.read_text()[-6000:]
        yield found
    except BaseException:
        print(log.read_text()[-8000:])  # noqa: T201 - the reason, for the failure report
        raise
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(home, ignore_errors=True)


def test_up_shows_each_component_then_a_summary(system: System) -> None:
    text = system.log.read_text()
    # Nothing a person is not meant to read: no warning, no traceback (a service forked
    # from the fork server once started with runpy's warning of a preloaded __main__).
    assert "Warning" not in text, text
    assert "Traceback" not in text, text
    order = [
        text.index(f"✓ {name}")
        for name in (
            "NATS",
            "PostgreSQL",
            "output-store",
            "approvals",
            "tools-runner",
            "gateway",
            "brain",
        )
    ]
    assert order == sorted(order)
    brain = system.state()["services"]["brain"]["url"]
    assert f"  API        {brain}\n" in text
    assert f"  console    {brain}/console\n" in text
    assert f"  approvals  {system.state()['services']['approvals']['url']}\n" in text
    assert "  traces     off" in text
    token = system.home / "operator-token"
    assert f"  token      {token}" in text
    assert token.stat().st_mode & 0o077 == 0
    assert (system.home / "up.json").stat().st_mode & 0o077 == 0
    # On a terminal (here: asked for) service logs are lines for people, not JSON.
    assert re.search(
        r"^\[brain\] \d\d:\d\d:\d\d INFO +tether_common\.service: brain ready$", text, re.M
    )


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_each_service_holds_only_the_secrets_it_uses(system: System) -> None:
    """Issue 28, 6: the decision key reaches brain and approvals only; the operator token
    no service (those holding identity get its hash); the database password no gateway;
    a service's own credential no other service; every NATS password its owner only."""
    home = system.home
    token = (home / "operator-token").read_text().strip()
    key = (home / "decision-key").read_text().strip()
    nats_conf = (home / "nats" / "nats-server.conf").read_text()
    passwords = dict(re.findall(r'user: "([\w-]+)"\s+password: "([^"]+)"', nats_conf))
    assert len(passwords) >= 6, nats_conf[:400]
    uses_key = {"brain", "approvals"}
    holds_identity = {"brain", "approvals", "output-store"}
    for name, service in system.state()["services"].items():
        env = environ_of(service["pid"])
        values = set(env.values())
        assert token not in values, name
        assert "TETHER_OPERATOR_TOKEN" not in env, name
        assert ("TETHER_OPERATOR_TOKEN_SHA256" in env) == (name in holds_identity), name
        assert (key in values) == (name in uses_key), name
        assert ("TETHER_DATABASE_URL" in env) == (name != "gateway"), name
        assert (RUNNER_KEY in values) == (name == "tools-runner"), name
        for user, password in passwords.items():
            assert (password in values) == (user == name), (name, user)
    mode = stat.S_IMODE(home.stat().st_mode)
    assert mode in (0o700, 0o710), oct(mode)  # 0710: PostgreSQL's own group, under root


async def test_approved_effects_are_applied_once_and_answered_ok(system: System) -> None:
    """Issue 27: on `tether up` as shipped (locked bus, the default agent, no special
    approvals rule) a file write and a shell command each ask; approved with
    `allow_once` over the approvals API, each is applied and its `tool.result` is ok
    (the runner's heartbeats no longer use the one reply a grant allowed), a read runs
    without asking, and nats-server logged no violation."""
    turns = [
        [call("file_write", path="hello.txt", content="hi from the run\n")],
        [call("shell", command="cat hello.txt && echo ran >> hello.txt")],
        [call("file_read", path="hello.txt")],
        say("done"),
    ]
    model = write_script(system.scripts, turns)
    token = (system.home / "operator-token").read_text().strip()
    services = system.state()["services"]
    headers = {"Authorization": f"Bearer {token}"}
    events: list[RunEvent] = []
    async with (
        TetherClient(services["brain"]["url"], token=token) as client,
        httpx.AsyncClient(base_url=services["approvals"]["url"], timeout=10) as http,
    ):
        run = await client.start_run("write, run, read", provider="scripted", model=model)
        asked = 0
        while not events or events[-1].kind != "run.end":
            async for event in client.events(run.run_id, after=events[-1].seq if events else 0):
                events.append(event)
                if event.kind == "tool.approval_needed":
                    break
            if events[-1].kind == "tool.approval_needed":
                asked += 1
                approval = events[-1].data["approval_id"]
                decided = await http.post(
                    f"/v1/approvals/{approval}/decision",
                    json={"decision": "allow_once"},
                    headers=headers,
                )
                assert decided.status_code == 200, decided.text
    results = {e.data["name"]: e.data for e in events if e.kind == "tool.result"}
    for name in ("file_write", "shell", "file_read"):
        assert results[name]["ok"], results[name]
    assert "hi from the run" in results["shell"]["content"]
    assert "ran" in results["file_read"]["content"]
    assert events[-1].data["status"] == "completed", events[-1].data
    assert (system.home / "workspace" / "hello.txt").read_text() == "hi from the run\nran\n"
    assert "Violation" not in (system.home / "nats" / "nats-server.log").read_text()
    assert asked == 2, [(e.kind, e.data.get("name")) for e in events]  # the read did not ask


def test_the_offline_planner_works_sums_and_times_out_in_chat(system: System) -> None:
    """Issue 29, item 3: on `tether up`'s default provider (rules), a sum is worked out
    with `calculate` and a follow-up in `tether chat` is read with the conversation; what
    it cannot do it says plainly."""
    ran = system.tether("run", "what is 17*23?")
    assert ran.returncode == 0, ran.stderr
    assert "17*23 = 391" in ran.stdout
    chat = subprocess.run(
        [str(TETHER), "chat"],
        env=system.env,
        input="what time is it in Tokyo?\nand in Paris?\nwrite me a poem\n",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert chat.returncode == 0, chat.stderr
    tokyo, paris, poem = (
        chat.stdout.index("Asia/Tokyo"),
        chat.stdout.index("Europe/Paris"),
        chat.stdout.index("I cannot answer that"),
    )
    assert tokyo < paris < poem, chat.stdout
    assert chat.stdout.count("start Tether with a real model") == 1, chat.stdout


def test_the_default_agent_reads_the_workspace_without_asking(system: System) -> None:
    """Issue 27, item 2, on the shipped path: `tether up`'s defaults (the rules planner,
    the default agent) read, list and search the workspace; none of it asks (a run that
    asked would exit 7 with a piped standard input)."""
    workspace = system.home / "workspace"
    (workspace / "docs").mkdir(exist_ok=True)
    (workspace / "docs" / "notes.txt").write_text("the whale is blue\n")
    for prompt, shown in (
        ("show me docs/notes.txt", "the whale is blue"),
        ("list the files in docs", "notes.txt"),
        ("which files mention whale?", "docs/notes.txt:1: the whale is blue"),
    ):
        ran = system.tether("run", prompt)
        assert ran.returncode == 0, (prompt, ran.stdout, ran.stderr)
        assert "approval" not in ran.stdout + ran.stderr, ran.stdout
        assert shown in ran.stdout, ran.stdout
        assert "■ completed" in ran.stdout


def test_status_counts_replicas_and_queues(system: System) -> None:
    done = system.tether("status", "-o", "json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    services = {s["name"]: s for s in found["services"]}
    assert set(services) == {"brain", "approvals", "output-store", "gateway", "tools-runner"}
    for name, service in services.items():
        assert (service["health"], service["replicas"]) == ("ready", 1), name
        assert service["checks"]["nats"] is True
    assert services["brain"]["pid"] == system.state()["services"]["brain"]["pid"]
    assert any(q["consumer"] == "brain_decisions" for q in found["queues"])
    assert found["pending_approvals"] == 0
    assert found["versions"]["nats-server"]
    table = system.tether("status")
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split() == ["SERVICE", "HEALTH", "REPLICAS", "PID", "URL"]
    assert "parked: 0 approvals pending" in table.stdout


@pytest.fixture
def as_user(system: System, monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, str, str]]:
    """`main` (the binary's entry point) in this process, as the system's user: cheaper
    than a process per call where the process itself is not what is tested."""
    for name in [k for k in os.environ if k.startswith(("TETHER_", "OTEL_"))]:
        monkeypatch.delenv(name)
    for name, value in system.env.items():
        if name.startswith("TETHER_"):
            monkeypatch.setenv(name, value)

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
        return code, out.getvalue(), err.getvalue()

    return run


def test_runs_by_prefix_and_last_in_every_format(
    system: System, as_user: Callable[..., tuple[int, str, str]]
) -> None:
    ran = system.tether("run", "what time is it in Tokyo?")
    assert ran.returncode == 0, ran.stderr
    assert "■ completed" in ran.stdout
    code, out, err = as_user("run", "what time is it in Paris?", "--detach", "-o", "json")
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    assert f"tether runs follow {run_id[:12]}" in err

    assert json.loads(as_user("runs", "show", "last", "-o", "json")[1])["run_id"] == run_id
    by_prefix = as_user("runs", "show", run_id[4:12], "-o", "yaml")[1]
    assert yaml.safe_load(by_prefix)["run_id"] == run_id
    listed = as_user("runs", "list", "-o", "yaml")[1]
    assert run_id in [r["run_id"] for r in yaml.safe_load(listed)]
    code, out, _ = as_user("runs", "follow", run_id[:12])
    assert (code, "■ completed" in out) == (0, True)

    code, _, err = as_user("runs", "show", "run_")
    assert code == 2
    assert "matches" in err
    assert run_id in err
    code, _, err = as_user("runs", "stop", "zzzz")
    assert code == 5
    assert err.startswith("error: not_found:")


def test_ctrl_c_and_a_dropped_stream(system: System, tmp_path: Path) -> None:
    """A run parked for approval: Ctrl-C while following leaves it be; a follower whose
    brain is killed resumes after the restart, showing every event once."""
    model = write_script(
        system.scripts, [[call("file_write", path="notes.txt", content="hi")], say("written")]
    )
    started = system.tether(
        "run", "write a note", "--provider", "scripted", "--model", model, "-d", "-o", "json"
    )
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    out = tmp_path / "first.out"
    first = system.start("runs", "follow", run_id[:12], out=out)
    until_sync(
        lambda: "approval_needed" in out.read_text(),
        timeout=WAIT_S,
        every=0.2,
        what="the approval event",
    )
    first.send_signal(signal.SIGINT)
    assert first.wait(60) == 130
    said = out.with_suffix(".err").read_text()
    assert f"Run {run_id[:12]} goes on" in said
    assert f"tether runs follow {run_id[:12]}" in said
    assert "Traceback" not in said

    out = tmp_path / "second.out"
    second = system.start("runs", "follow", "last", out=out)
    until_sync(
        lambda: "approval_needed" in out.read_text(),
        timeout=WAIT_S,
        every=0.2,
        what="the approval event again",
    )
    brain = system.state()["services"]["brain"]
    os.kill(brain["pid"], signal.SIGKILL)  # `tether up` starts it again
    until_sync(
        lambda: "event stream lost" in out.with_suffix(".err").read_text(),
        timeout=WAIT_S,
        every=0.2,
        what="the drop",
    )

    def brain_ready() -> bool:
        try:
            return httpx.get(f"{brain['url']}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    until_sync(brain_ready, timeout=180, every=0.2, what="the restarted brain")
    approvals = json.loads(system.tether("approvals", "list", "-o", "json").stdout)
    [approval] = [a for a in approvals if a["run_id"] == run_id]
    assert system.tether("approvals", "approve", approval["approval_id"]).returncode == 0
    assert second.wait(180) == 0, out.with_suffix(".err").read_text()
    shown = out.read_text()
    assert "written" in shown
    assert shown.count("▶ run") == 1
    assert shown.count("[tool.approval_needed]") == 1


def test_a_piped_run_says_how_to_approve_and_exits_7(system: System, tmp_path: Path) -> None:
    """Issue 29 (4, 5): `tether run` on a pipe showed `[tool.approval_needed] file_write …`
    with no approval id and blocked until the request expired; the id's prefix was not
    found; `approvals show` printed raw fields. Now it prints the id and the command that
    approves it and exits 7 (`--wait-approval` waits); the id's prefix shows the card, with
    the diff, and approves it; the run then completes."""
    model = write_script(
        system.scripts,
        [[call("file_write", path="piped.txt", content="from a pipe\n")], say("piped done")],
    )
    ran = system.tether("run", "write from a pipe", "--provider", "scripted", "--model", model)
    assert ran.returncode == 7, ran.stdout + ran.stderr
    [approval_id] = re.findall(r"\(approval (apr_[0-9a-f]{32})\)", ran.stdout)
    assert f"  tether approvals approve {approval_id}\n" in ran.stderr
    run_id = re.findall(r"▶ run (run_[0-9a-f]{32})", ran.stdout)[0]
    assert f"follow it again with: tether runs follow {run_id[:12]}" in ran.stderr

    card = system.tether("approvals", "show", approval_id[4:12])
    assert card.returncode == 0, card.stderr
    lines = card.stdout.splitlines()
    assert lines[0] == f"── approval {approval_id}: pending"
    assert "   tool     file_write" in lines
    assert any(x.startswith("   why      ") for x in lines)
    assert any(x.startswith("   expires  ") and x.endswith("s)") for x in lines)
    assert any(x.startswith("   decides  ") for x in lines)
    assert "   created piped.txt" in lines
    assert "     +from a pipe" in lines
    assert "action_digest" not in card.stdout
    assert max(len(x) for x in lines) < 120, max(lines, key=len)

    approved = system.tether("approvals", "approve", approval_id[:12])
    assert approved.returncode == 0, approved.stderr
    followed = system.tether("runs", "follow", run_id[:12])
    assert followed.returncode == 0, followed.stderr
    assert "piped done" in followed.stdout
    assert (system.home / "workspace" / "piped.txt").read_text() == "from a pipe\n"

    model = write_script(
        system.scripts,
        [[call("file_write", path="waited.txt", content="waited\n")], say("waited done")],
    )
    out = tmp_path / "waiting.out"
    waiting = system.start(
        "run", "write, waiting", "--provider", "scripted", "--model", model, "--wait-approval",
        out=out,
    )  # fmt: skip
    said = out.with_suffix(".err")
    until_sync(
        lambda: "tether approvals approve apr_" in said.read_text(),
        timeout=WAIT_S,
        every=0.2,
        what="the command",
    )
    assert waiting.poll() is None, said.read_text()
    [approval_id] = re.findall(r"tether approvals approve (apr_[0-9a-f]{32})", said.read_text())
    assert system.tether("approvals", "approve", approval_id[4:16]).returncode == 0
    assert waiting.wait(120) == 0, said.read_text()
    assert "waited done" in out.read_text()


def completions(system: System, words: str) -> list[str]:
    """What bash's completion script gets from `tether` for the last of `words`."""
    cword = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    asked = system.tether(_TETHER_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=cword)
    assert (asked.returncode, asked.stderr) == (0, ""), asked.stderr
    return asked.stdout.split()


def test_streams_as_json_lines_fields_and_ids_completed(system: System) -> None:
    """Issue 29, 7: `-o jsonl` writes a followed run's events one JSON object a line,
    `-o jsonl=seq,kind` and `-o value=run_id` select fields, and shell completion offers
    the run ids and pending approval ids the server knows (a prefix narrows them)."""
    model = write_script(
        system.scripts,
        [[call("file_write", path="completed.txt", content="x\n")], say("done")],
    )
    started = system.tether(
        "run", "write for completion", "--provider", "scripted", "--model", model,
        "-d", "-o", "value=run_id",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    assert re.fullmatch(r"run_[0-9a-f]{32}", run_id), started.stdout

    ids = system.tether("runs", "list", "-o", "value=run_id,status")
    assert ids.returncode == 0, ids.stderr
    rows = [line.split("\t") for line in ids.stdout.splitlines()]
    assert all(len(row) == 2 for row in rows), ids.stdout
    assert run_id in [row[0] for row in rows]

    assert run_id in completions(system, "tether runs show ")
    assert completions(system, f"tether runs follow {run_id[:10]}") == [run_id]
    assert completions(system, "tether runs show la") == ["last"]

    def pending() -> list[str]:
        listed = system.tether("approvals", "list", "-o", "jsonl=approval_id,run_id")
        found = [json.loads(line) for line in listed.stdout.splitlines()]
        return [a["approval_id"] for a in found if a["run_id"] == run_id]

    until_sync(pending, timeout=WAIT_S, every=0.2, what="the approval")
    [approval_id] = pending()
    assert approval_id in completions(system, "tether approvals approve ")
    assert completions(system, f"tether approvals show {approval_id[:8]}") == [approval_id]
    assert completions(system, "tether approvals deny apr_ffffffff") == []
    assert system.tether("approvals", "approve", approval_id).returncode == 0

    followed = system.tether("runs", "follow", run_id, "-o", "jsonl")
    assert followed.returncode == 0, followed.stderr
    events = [json.loads(line) for line in followed.stdout.splitlines()]
    assert (events[0]["kind"], events[-1]["kind"]) == ("run.start", "run.end")
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    assert all(e["run_id"] == run_id for e in events)
    picked = system.tether("runs", "follow", run_id, "-o", "jsonl=seq,kind,data.name")
    assert picked.returncode == 0, picked.stderr
    lines = [json.loads(line) for line in picked.stdout.splitlines()]
    assert [set(line) for line in lines] == [{"seq", "kind", "data.name"}] * len(events)
    assert {"kind": "tool.call", "seq": ANY, "data.name": "file_write"} in lines


def test_draw_the_cli_session(system: System, tmp_path: Path) -> None:
    """The README's picture of a CLI session: real output of `run` and `status`, saved as
    `cli-session.svg` under `TETHER_SCREENSHOTS_DIR` (docs/images for the README), else
    kept with the test's files."""
    screen = Console(record=True, width=110, file=io.StringIO())
    colour = {"FORCE_COLOR": "1", "COLUMNS": "110"}
    for argv in (("run", "what time is it in Tokyo?"), ("status",)):
        done = system.tether(*argv, **colour)
        assert done.returncode == 0, done.stderr
        command = " ".join(f'"{a}"' if " " in a else a for a in argv)
        screen.print(Text(f"$ tether {command}", style="bold"))
        screen.print(Text.from_ansi(done.stdout.rstrip()))
        screen.print()
    svg = Path(os.environ.get("TETHER_SCREENSHOTS_DIR") or tmp_path) / "cli-session.svg"
    svg.parent.mkdir(parents=True, exist_ok=True)
    screen.save_svg(str(svg), title="tether")
    drawn = svg.read_text().replace("&#160;", " ")
    for seen in ("$ tether status", "SERVICE", "■ completed"):
        assert seen in drawn


# Keep this test last in the module: it ends the system the others share.
def test_up_killed_outright_takes_everything_with_it(system: System) -> None:
    """Issue 27, item 6: `tether up` SIGKILLed leaves nothing running: nats-server,
    PostgreSQL (the postmaster is up's own child, its backends follow it), the five
    services and whatever they started (the runner's file workers, their fork server and
    resource tracker)."""
    tree = descendants(system.proc.pid)
    commands = " | ".join(p.command for p in tree)
    for part in ("nats-server", "bin/postgres", *(spec.module for spec in SERVICES)):
        assert part in commands, (part, commands)
    system.proc.send_signal(signal.SIGKILL)
    system.proc.wait()
    left = survivors(tree, within_s=10.0)
    kill_all(left)
    assert left == [], [p.command for p in left]
