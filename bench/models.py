"""`python -m bench models`: the everyday battery (`bench.models_tasks`) through the real
services against a small model served by llama.cpp, and the same battery through a plain
prompting loop with the same model and the same tools (the baseline), the two loops taking
turns task by task (one at a time, so neither slows the other), each on its own server
and workspace; then the prefill cost of a cached against
an uncached prompt prefix. Per task and per lane it prints the seconds, the model steps,
and each request's prompt as the server's KV cache met it: tokens reused from the
previous request's prefix, tokens evaluated and tokens generated (`bench.models_cache`, read from the
server's log); then the two lanes side by side, task by task, with the ratio of seconds
(issue 33: Tether ≤ 1.5x the plain loop per task) and the load average around the run
(the machine may be shared: only same-run ratios mean anything).

The model is the evaluation GGUF (`TETHER_EVAL_MODEL`, else what
`../shared/models/fetch-eval-model` prints); it is evaluation only, never a dependency of
the product or of `make test`. `TETHER_EVAL_TASKS` (comma list of task names or kinds)
runs a subset, `TETHER_EVAL_BUDGET_S` bounds the time, `TETHER_EVAL_PLAIN=0` leaves the
plain loop out (a quick look at Tether alone: no comparison is printed),
`TETHER_EVAL_TRACE=1` prints the steps of each task Tether missed. Every figure is
printed; nothing is asserted.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.baseline_loop import plain_loop
from bench.models_cache import Prefill, ServerLog, steps_line, summarise
from bench.models_tasks import Task, battery, lay_out, utc_now
from bench.stack import OPERATOR_TOKEN, Stack, servers, services
from tether_client.client import TetherClient
from tether_client.local_model import LlamaServer, start_llama_server, stop, wait_ready
from tether_common.bus import Bus
from tether_common.subjects import Subjects
from tether_common.topology import BY_NAME

FETCH = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "fetch-eval-model"
ALIAS = "qwen2.5-coder-0.5b-instruct"
N_CTX = 8192
# What the plain loop needs: a tools-runner of its own (and the store of large results).
PLAIN_SERVICES = (BY_NAME["output-store"], BY_NAME["tools-runner"])
RUN_TIMEOUT_S = 900.0
# The sandbox user the runner hands the workspace to (tools-runner settings' default).
SANDBOX_UID = SANDBOX_GID = 64000


@dataclass(slots=True)
class Outcome:
    task: str
    ok: bool
    steps: int
    seconds: float
    answer: str
    approvals: int = 0  # calls an operator allowed (tether up's defaults ask for them)
    prefills: list[Prefill] = field(default_factory=list)  # each model request's prompt


def eval_model() -> Path:
    named = os.environ.get("TETHER_EVAL_MODEL")
    if named:
        return Path(named)
    found = subprocess.run([str(FETCH)], capture_output=True, text=True, check=True)
    return Path(found.stdout.strip().splitlines()[-1])


def chosen(tasks: list[Task]) -> list[Task]:
    """The tasks `TETHER_EVAL_TASKS` names (all by default), kinds taken in turn (a time
    task, a sum, a read, ...), so a battery cut short by the time budget still has some
    of every kind."""
    wanted = {w.strip() for w in os.environ.get("TETHER_EVAL_TASKS", "").split(",") if w.strip()}
    picked = [t for t in tasks if not wanted or t.name in wanted or t.kind in wanted]
    kinds: dict[str, list[Task]] = {}
    for task in picked:
        kinds.setdefault(task.kind, []).append(task)
    rounds = itertools.zip_longest(*kinds.values())
    return [task for row in rounds for task in row if task is not None]


def budget_s() -> float:
    """`TETHER_EVAL_BUDGET_S`: no task is started after this many seconds (default: none);
    both loops are then compared on the tasks both finished."""
    return float(os.environ.get("TETHER_EVAL_BUDGET_S", "inf"))


def prepare(workspace: Path) -> None:
    """The battery's files afresh, owned by the sandbox user (the tools act as it)."""
    lay_out(workspace)
    if os.geteuid() == 0:
        for path in [workspace, *workspace.rglob("*")]:
            os.chown(path, SANDBOX_UID, SANDBOX_GID)


async def through_tether(s: Stack, task: Task) -> Outcome:
    """One task on `tether up`'s defaults: the default agent and mode, no approvals rule;
    a call that asks is allowed once by an operator over the approvals API, and counted."""
    started, since = time.perf_counter(), utc_now()
    async with TetherClient(s.api_url, token=OPERATOR_TOKEN, timeout=60) as client:
        accepted = await client.start_run(task.prompt, provider="local")
        operator = asyncio.create_task(allow_each_ask(s, client, accepted.run_id))
        try:
            await s.wait_status([accepted.run_id], timeout=RUN_TIMEOUT_S)
        except TimeoutError:
            # Stopped, so it does not go on asking the model while the baseline does (the
            # server takes one request at a time and drops the one in flight for a new one).
            await client.stop_run(accepted.run_id)
            await s.wait_status([accepted.run_id], timeout=RUN_TIMEOUT_S)
        approvals = await asyncio.wait_for(operator, timeout=60)
        run = await client.get_run(accepted.run_id)
    seconds = time.perf_counter() - started
    answer = run.answer or f"[{run.status}: {run.stop_reason}]"
    model_steps = sum(1 for step in run.steps if step.kind == "model")
    ok = run.status == "completed" and task.check(answer, s.base / "workspace", since)
    if not ok and os.environ.get("TETHER_EVAL_TRACE") == "1":
        for step in run.steps:  # what the model did, to read a miss
            said = " ".join(step.text.split())[:300]
            print(f"    {task.name} step {step.step} {step.kind} {step.tool or ''} {said}")
    return Outcome(task.name, ok, model_steps, seconds, answer, approvals=approvals)


async def allow_each_ask(s: Stack, client: TetherClient, run_id: str) -> int:
    """An operator at the console who allows each call the run asks for, once (the
    battery measures the model, not a person): how many it allowed."""
    allowed = 0
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    approvals = s.supervisor.child("approvals").url
    async with httpx.AsyncClient(base_url=approvals, headers=headers, timeout=30) as http:
        async for event in client.events(run_id):
            if event.kind == "tool.approval_needed":
                decided = await http.post(
                    f"/v1/approvals/{event.data['approval_id']}/decision",
                    json={"decision": "allow_once"},
                )
                decided.raise_for_status()
                allowed += 1
    return allowed


async def prefill(base_url: str, system: str) -> tuple[float, float]:
    """Seconds to the first streamed token: the same long prefix again (cached), and with
    its first word changed (uncached)."""
    async with httpx.AsyncClient(timeout=300) as http:
        await _first_token(http, base_url, system)  # warm: this prefix is now cached
        cached = await _first_token(http, base_url, system)
        uncached = await _first_token(http, base_url, "Note. " + system)
    return cached, uncached


async def _first_token(http: httpx.AsyncClient, base_url: str, system: str) -> float:
    body = {
        "model": ALIAS,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "Say OK."},
        ],
        "max_tokens": 4,
        "stream": True,
    }
    started = time.perf_counter()
    async with http.stream("POST", f"{base_url}/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                return time.perf_counter() - started
    return time.perf_counter() - started


def _progress(label: str, o: Outcome) -> None:
    answer = " ".join(o.answer.split())[:100]
    mark = "ok  " if o.ok else "MISS"
    cache = steps_line(o.prefills)
    print(
        f"  {label} {mark} {o.task:24} {o.steps} steps {o.seconds:5.0f} s [{cache}]  {answer}",
        flush=True,
    )


def report(label: str, outcomes: list[Outcome]) -> float:
    done = sum(o.ok for o in outcomes)
    rate = done / len(outcomes) if outcomes else 0.0
    print(f"\n-- {label}: {done}/{len(outcomes)} completed ({rate:.0%})")
    for o in outcomes:
        mark = "ok  " if o.ok else "MISS"
        answer = " ".join(o.answer.split())[:90]
        asked = f" {o.approvals} allowed" if o.approvals else ""
        print(f"{mark} {o.task:28} {o.steps:2} steps {o.seconds:6.1f} s{asked}  {answer}")
        # Each request as the server's cache met it: reused+evaluated prompt tokens.
        print(f"     per request (reused+evaluated>generated): {steps_line(o.prefills)}")
    if outcomes:
        steps = sum(o.steps for o in outcomes) / len(outcomes)
        seconds = sum(o.seconds for o in outcomes) / len(outcomes)
        allowed = sum(o.approvals for o in outcomes)
        print(f"   mean: {steps:.1f} steps, {seconds:.1f} s per task; {allowed} calls allowed")
        requests = [p for o in outcomes for p in o.prefills]
        print(f"   per request: {summarise(requests).line()}")
    return rate


def side_by_side(ours: list[Outcome], theirs: list[Outcome]) -> list[float]:
    """Task by task: seconds, requests and evaluated prompt tokens of both loops, and the
    ratio of seconds; the ratios, for the worst and the median."""
    print(
        "\n-- side by side (Tether | plain loop; requests, prompt tokens, evaluated and "
        "generated per request)"
    )
    ratios = []
    for us, them in zip(ours, theirs, strict=True):
        ratio = us.seconds / max(them.seconds, 1e-3)
        ratios.append(ratio)
        a, b = summarise(us.prefills), summarise(them.prefills)
        print(
            f"{us.task:28} {us.seconds:6.1f} s | {them.seconds:6.1f} s  {ratio:4.2f}x   "
            f"{a.requests} req {a.prompt:4.0f} tok {a.evaluated:4.0f} eval {a.generated:3.0f} gen | "
            f"{b.requests} req {b.prompt:4.0f} tok {b.evaluated:4.0f} eval {b.generated:3.0f} gen"
        )
    if ratios:
        ordered = sorted(ratios)
        print(
            f"   seconds per task, Tether / plain: median {ordered[len(ordered) // 2]:.2f}x, "
            f"worst {ordered[-1]:.2f}x, tasks within 1.5x: "
            f"{sum(r <= 1.5 for r in ratios)}/{len(ratios)}"
        )
    return ratios


async def measure_models(results: dict[str, float]) -> None:
    """Both loops, taking turns task by task, each with its own model server (so neither
    evicts the other's cached prompt prefix: llama.cpp's server caches one prompt) and
    its own workspace (the write and edit tasks would otherwise meet): Tether on the five
    services, the plain loop on a tools-runner of its own."""
    tasks = chosen(battery())
    model = eval_model()
    with _Served(model, "tether") as ours_server, _Served(model, "plain") as their_server:
        await wait_ready(ours_server, timeout=300)
        await wait_ready(their_server, timeout=300)
        # What `tether up` with the local provider sets (the bundled model's server, here
        # the evaluation model); nothing else: the default agent, mode and approvals.
        env = {
            "TETHER_GATEWAY_LOCAL_BASE_URL": ours_server.base_url,
            "TETHER_GATEWAY_LOCAL_MODEL": ALIAS,
            "TETHER_GATEWAY_LOCAL_CONTEXT_WINDOW": str(N_CTX),
            "TETHER_GATEWAY_INACTIVITY_TIMEOUT_S": "600",
            "TETHER_BRAIN_CONTEXT_WINDOWS": json.dumps({ALIAS: N_CTX}),
        }
        # A loaded machine (the battery runs for an hour) meets a generous start.
        async with (
            servers("models") as srv,
            services(srv, env, ready_timeout=600) as s,
            servers("models-plain") as plain_srv,
            services(plain_srv, specs=PLAIN_SERVICES, ready_timeout=600) as p,
        ):
            print(f"model {model.name}; {len(tasks)} tasks, the two loops taking turns", flush=True)
            load_before = os.getloadavg()[0]
            with_plain = os.environ.get("TETHER_EVAL_PLAIN", "1") != "0"
            ours, theirs = await _take_turns(s, ours_server, p, their_server, tasks, with_plain)
            if not theirs:
                report("Tether (the plain loop switched off: TETHER_EVAL_PLAIN=0)", ours)
                return
        both = min(len(ours), len(theirs))
        if both < len(tasks):
            print(f"\ntime budget: {both} of {len(tasks)} tasks finished by both loops")
        ours, theirs = ours[:both], theirs[:both]
        results["models_tether_rate"] = report("Tether", ours)
        results["models_plain_rate"] = report("plain loop with a tools-off final round", theirs)
        ratios = side_by_side(ours, theirs)
        if ratios:
            results["models_worst_task_ratio"] = max(ratios)
            results["models_median_task_ratio"] = sorted(ratios)[len(ratios) // 2]
        print(
            f"   load average: {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
        )
        # Seconds per task on the tasks both finished (issue 33: Tether ≤ 1.5x the plain loop).
        results["models_tether_s_per_task"] = sum(o.seconds for o in ours) / max(len(ours), 1)
        results["models_plain_s_per_task"] = sum(o.seconds for o in theirs) / max(len(theirs), 1)
        system = _tether_like_prefix()
        cached, uncached = await prefill(ours_server.base_url, system)
        print(
            f"\nprefill of a {len(system)}-character system prompt: uncached {uncached:.2f} s, "
            f"cached prefix {cached:.2f} s ({uncached / max(cached, 1e-3):.1f}x)"
        )
        results["models_prefill_uncached_s"] = uncached
        results["models_prefill_cached_s"] = cached


async def _take_turns(
    s: Stack,
    ours: LlamaServer,
    p: Stack,
    theirs: LlamaServer,
    tasks: list[Task],
    with_plain: bool,
) -> tuple[list[Outcome], list[Outcome]]:
    """Each task through Tether, then through the plain loop: one lane at a time, so
    each has the machine's cores to itself (two llama.cpp servers of two threads each
    on two cores slowed each other's prefill up to tenfold, so a task's figure depended
    on what the other lane did meanwhile)."""
    until = time.monotonic() + budget_s()
    ours_log, theirs_log = ServerLog(ours.log_path), ServerLog(theirs.log_path)
    tethered: list[Outcome] = []
    plain: list[Outcome] = []
    bus = await Bus.connect(p.nats_url, service="bench-models", subjects=Subjects())
    try:
        for task in tasks:
            if time.monotonic() > until:
                break
            prepare(s.base / "workspace")
            ours_log.mark()
            tethered.append(await through_tether(s, task))
            tethered[-1].prefills = ours_log.since()
            _progress("tether", tethered[-1])
            if not with_plain:
                continue
            workspace = p.base / "workspace"
            prepare(workspace)
            theirs_log.mark()
            plain.append(await plain_loop(bus, theirs.base_url, ALIAS, task, workspace))
            plain[-1].prefills = theirs_log.since()
            _progress("plain ", plain[-1])
    finally:
        await bus.close()
    return tethered, plain


def _tether_like_prefix() -> str:
    """A system prompt of the size Tether sends the local model: the tool prompt first."""
    from tether_common.messages.gateway import OfferedToolSpec
    from tether_common.toolcalls import render_tool_prompt
    from tether_tools_runner.tools.calculate import CALCULATE
    from tether_tools_runner.tools.clock import CONVERT_TIME, CURRENT_TIME

    tools = [
        OfferedToolSpec(name=t.name, description=t.description, parameters=t.parameters)
        for t in (CURRENT_TIME, CONVERT_TIME, CALCULATE)
    ]
    return render_tool_prompt(tools, json_reply=True) + "\n\nYou are Tether."


class _Served:
    """A llama.cpp server on the eval model, stopped on the way out."""

    def __init__(self, model: Path, lane: str) -> None:
        self.model = model
        self.lane = lane
        self.server: LlamaServer | None = None

    def __enter__(self) -> LlamaServer:
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"tether-bench-llama-{self.lane}.log"
        self.server = start_llama_server(
            self.model, _free_port(), n_ctx=N_CTX, alias=ALIAS, log_path=log
        )
        return self.server

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            stop(self.server)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


__all__ = ["measure_models"]
