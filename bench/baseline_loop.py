"""The baseline of `python -m bench models`: a plain prompting loop, the kind written in an
afternoon. The tools are listed in the system prompt, a reply holding a JSON object with
a known `name` is run (by the same tools-runner Tether uses, over the bus), its result
goes back as a user message, and after three tool rounds one final round with the tools
switched off asks for the answer from the results."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from bench.models_tasks import utc_now
from tether_common.bus import Bus
from tether_common.messages.tools import CatalogRequest, ExecuteTool

if TYPE_CHECKING:
    from bench.models import Outcome
    from bench.models_tasks import Task

TOOLS = (
    *("current_time", "convert_time", "calculate", "file_read", "file_list", "file_search"),
    *("file_write", "file_edit", "shell"),
)
ROUNDS = 3
ATTEMPTS = 3  # of one request the server dropped
FINAL = "Answer my question now, in plain words, from the tool results above. Do not call tools."
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


async def plain_loop(bus: Bus, base_url: str, model: str, task: Task, workspace: Path) -> Outcome:
    from bench.models import Outcome

    catalog = await bus.request(bus.subjects.tool_catalog, CatalogRequest(), timeout=30)
    tools = {t.name: t for t in catalog.tools if t.name in TOOLS}
    listing = "\n".join(
        f"- {t.name}({', '.join(t.parameters.get('properties', {}))}): {t.description}"
        for t in tools.values()
    )
    system = (
        "You can call these tools:\n" + listing + "\nTo call one, reply with only JSON: "
        '{"name": "tool", "arguments": {...}}. Otherwise answer the user.'
    )
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": task.prompt},
    ]
    started, since, steps, answer = time.perf_counter(), utc_now(), 0, ""
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as http:
        for _ in range(ROUNDS):
            steps += 1
            text = await _chat(http, model, messages)
            call = _call(text, tools)
            if call is None:
                answer = text
                break
            result = await _run(bus, call)
            messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": f"Tool result:\n{result}"},
            ]
        else:
            steps += 1
            messages[0] = {"role": "system", "content": "You are a helpful assistant."}
            answer = await _chat(http, model, [*messages, {"role": "user", "content": FINAL}])
    ok = task.check(answer, workspace, since)
    return Outcome(task.name, ok, steps, time.perf_counter() - started, answer)


def _call(text: str, tools: dict[str, Any]) -> dict[str, Any] | None:
    found = _OBJECT.search(text)
    try:
        call = json.loads(found.group()) if found else None
    except ValueError:
        return None
    if not isinstance(call, dict) or call.get("name") not in tools:
        return None
    return call


async def _run(bus: Bus, call: dict[str, Any]) -> str:
    args = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
    body = ExecuteTool(run_id="plain", call_id=uuid.uuid4().hex[:12], name=call["name"], args=args)
    result = await bus.request(bus.subjects.tool_execute, body, timeout=180)
    return result.content[:4000]


async def _chat(http: httpx.AsyncClient, model: str, messages: list[dict[str, Any]]) -> str:
    body = {"model": model, "messages": messages, "max_tokens": 512, "temperature": 0}
    for attempt in range(ATTEMPTS):
        try:
            reply = await http.post("/chat/completions", json=body)
            break
        except httpx.TransportError:
            # llama.cpp's Python server drops a request when another one arrives.
            if attempt == ATTEMPTS - 1:
                raise
    reply.raise_for_status()
    return str(reply.json()["choices"][0]["message"]["content"] or "")
