"""`bench models`' per-request prompt (and generated) figures, read from a llama.cpp server's log as
llama-cpp-python 0.3 writes it: a request whose prompt shares a prefix with the one
before, one that shares none, one the cache held whole; only what a task logged after
its mark is its own."""

from __future__ import annotations

from pathlib import Path

from bench.models_cache import Prefill, ServerLog, parse, steps_line, summarise

FIRST = [
    'INFO:     127.0.0.1:58570 - "GET /v1/models HTTP/1.1" 200 OK',
    "llama_perf_context_print:        load time =     901.20 ms",
    "llama_perf_context_print: prompt eval time =    1200.07 ms /   208 tokens "
    "(    5.77 ms per token,   173.32 tokens per second)",
    "llama_perf_context_print:        eval time =    5612.04 ms /    19 runs   "
    "(  295.37 ms per token,     3.39 tokens per second)",
    "llama_perf_context_print:       total time =   37177.69 ms /   227 tokens",
    'INFO:     127.0.0.1:35766 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
]
SECOND = [
    "Llama.generate: 227 prefix-match hit, remaining 160 prompt tokens to eval",
    "llama_perf_context_print: prompt eval time =   33370.32 ms /   160 tokens "
    "(  208.56 ms per token,     4.79 tokens per second)",
    "llama_perf_context_print:        eval time =     544.93 ms /    17 runs   "
    "(   32.05 ms per token,    31.20 tokens per second)",
    "llama_perf_context_print:       total time =   51734.46 ms /   179 tokens",
]
THIRD = [
    "Llama.generate: full prompt already cached, skipping reset",
    "llama_perf_context_print: prompt eval time =       0.00 ms /     0 tokens",
]


def test_each_request_is_read_as_reused_evaluated_and_generated_tokens() -> None:
    found = parse([*FIRST, *SECOND, *THIRD])
    assert found == [Prefill(0, 208, 19), Prefill(227, 160, 17), Prefill(0, 0)]
    assert steps_line(found) == "0+208>19 227+160>17 0+0>0"
    summary = summarise(found[:2])
    assert (summary.requests, summary.prompt, summary.evaluated) == (2, 297.5, 184.0)
    assert summary.generated == 18.0
    assert round(summary.hit, 3) == round(227 / 595, 3)


def test_a_task_reads_only_what_the_server_logged_after_its_mark(tmp_path: Path) -> None:
    path = tmp_path / "llama.log"
    path.write_text("\n".join(FIRST) + "\n")
    log = ServerLog(path)
    log.mark()
    with path.open("a") as out:
        out.write("\n".join(SECOND) + "\n")
    assert log.since() == [Prefill(227, 160, 17)]
    assert ServerLog(tmp_path / "absent.log").since() == []
