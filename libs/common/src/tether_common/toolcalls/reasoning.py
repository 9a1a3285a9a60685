"""Separates reasoning (`<think>`, `<thinking>`, `<reasoning>` blocks) from visible text.

Reasoning is removed before calls are looked for, so a call a model only considered
while thinking is never run.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["split_reasoning"]

_TAGS: Final = ("think", "thinking", "reasoning")
_OPEN: Final = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_ANY_CLOSE: Final = re.compile(r"</(?:think|thinking|reasoning)>", re.IGNORECASE)
_CLOSE: Final = {tag: re.compile(rf"</{tag}>", re.IGNORECASE) for tag in _TAGS}


def split_reasoning(text: str) -> tuple[str, str]:
    """Return `(visible, reasoning)`; the reasoning pieces are stripped and joined."""
    visible: list[str] = []
    thoughts: list[str] = []
    pos = _orphan_close(text, thoughts)
    while (opened := _OPEN.search(text, pos)) is not None:
        visible.append(text[pos : opened.start()])
        closed = _CLOSE[opened.group(1).lower()].search(text, opened.end())
        if closed is None:  # unclosed: the model was cut off mid-thought
            thoughts.append(text[opened.end() :])
            pos = len(text)
            break
        thoughts.append(text[opened.end() : closed.start()])
        pos = closed.end()
    visible.append(text[pos:])
    shown = "".join(_ANY_CLOSE.sub("", piece) for piece in visible)
    return shown, "\n\n".join(thought.strip() for thought in thoughts if thought.strip())


def _orphan_close(text: str, thoughts: list[str]) -> int:
    """A closing tag before any opening one: the template opened the block in the prompt."""
    closed = _ANY_CLOSE.search(text)
    if closed is None:
        return 0
    opened = _OPEN.search(text)
    if opened is not None and opened.start() < closed.start():
        return 0
    thoughts.append(text[: closed.start()])
    return closed.end()
