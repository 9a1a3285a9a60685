"""Typed answers in the model's view: the system prompt's note on the run's output
schemas, the note that sends an answer back naming its violation, and whether a text is
an answer that fits (so never a tool call written out). Reading an answer against the
schemas is `tether_common.typed_answers.read_answer`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tether_common.typed_answers import Violation, read_answer

__all__ = ["fits_typed", "output_instruction", "repair_note"]


def output_instruction(schemas: Sequence[dict[str, Any]]) -> str:
    """The system prompt's note: the final answer is one JSON object fitting each schema."""
    which = "this JSON Schema" if len(schemas) == 1 else "each of these JSON Schemas"
    shown = "\n".join(json.dumps(s, ensure_ascii=False, separators=(",", ":")) for s in schemas)
    return (
        "Your final answer must be a single JSON object, and nothing else (no prose around "
        f"it), that validates against {which}:\n{shown}"
    )


def repair_note(violation: Violation) -> str:
    """What the model is told of an answer that does not fit: where, what, and to answer
    again with the JSON object alone."""
    return (
        f"Your answer does not fit the required JSON Schema: at {violation.path}, "
        f"{violation.message}. Answer again with only the corrected JSON object."
    )


def fits_typed(schemas: Sequence[dict[str, Any]], text: str) -> bool:
    """Whether `text` is a typed run's answer that fits its schemas (False for an untyped
    run). A JSON answer can look like a tool's bare arguments (`{"city": ...}`), and one
    that fits is the answer. Read on the event loop: bounded (`VALIDATION_BUDGET`), and
    asked only of a tools-off step's text."""
    return bool(schemas) and isinstance(read_answer(text, schemas), dict)
