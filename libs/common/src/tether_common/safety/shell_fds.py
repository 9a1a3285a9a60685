"""Which of a command line's output descriptors are provably still the inherited pipe.

Bash opens `/dev/stdout`, `/dev/fd/N` and `/proc/self/fd/N` anew (the kernel reopens
the file behind the descriptor), so writing to one of them writes whatever file that
descriptor holds: after `3<app.py` or `1<app.py`, `>/dev/fd/3` or `>/dev/stdout` opens
app.py for writing. A write through a descriptor path is harmless only when the
descriptor is stdout or stderr (the runner's output pipe) and nothing on the line can
have reopened it: no redirection that points 1 or 2 at a file or at another
descriptor, anywhere on the line (compound commands pass their redirections to what
runs inside them), and no `exec`, which keeps its redirections for later commands.
"""

from __future__ import annotations

from collections.abc import Iterator

from .shell_deny import descriptor_of
from .shell_words import Node

OUTPUTS = frozenset({1, 2})
_INPUTS = frozenset({"<", "<&", "<>", "<<", "<<<", "<<-"})
_BOTH = frozenset({"&>", "&>>"})


def _nodes(node: Node) -> Iterator[Node]:
    yield node
    children = [
        *(getattr(node, "parts", None) or getattr(node, "list", None) or []),
        *(getattr(node, "redirects", None) or []),
    ]
    for attribute in ("command", "output"):
        child = getattr(node, attribute, None)
        if hasattr(child, "kind"):
            children.append(child)
    for child in children:
        yield from _nodes(child)


def _effect(redirect: Node) -> tuple[frozenset[int], dict[int, int]]:
    """The output descriptors this redirection may point anywhere but the pipe, and
    those it points at another output descriptor (`2>&1`, `>/dev/stderr`): good only
    while that one is."""
    kind = str(redirect.type)
    fd = redirect.input
    if kind in _BOTH or (kind == ">&" and fd is None and hasattr(redirect.output, "kind")):
        fds = OUTPUTS  # `&>f`, `>&f`: both
    elif isinstance(fd, int):
        fds = frozenset({fd})
    else:
        fds = frozenset({0 if kind in _INPUTS else 1})
    fds &= OUTPUTS
    if not fds or kind in _INPUTS:
        return fds, {}
    target = redirect.output
    source = None
    if isinstance(target, int):
        source = target
    elif hasattr(target, "kind"):
        path = str(target.word)
        if path == "/dev/null":
            return frozenset(), {}
        source = descriptor_of(path)
    if source in OUTPUTS:
        return frozenset(), {fd: source for fd in fds if fd != source}
    return fds, {}  # a file, another descriptor, `>&-`, a computed target


def inherited_outputs(trees: list[Node]) -> frozenset[int]:
    """The descriptors among 1 and 2 that stay the inherited output on the whole line."""
    changed: set[int] = set()
    copies: list[tuple[int, int]] = []
    for tree in trees:
        for node in _nodes(tree):
            if node.kind == "redirect":
                fds, copied = _effect(node)
                changed |= fds
                copies.extend(copied.items())
            elif node.kind == "command":
                words = [part for part in node.parts if part.kind == "word"]
                if words and str(words[0].word) == "exec":
                    return frozenset()
    # A copy of a changed descriptor is changed too (`2<f 1>&2`), in whatever order.
    for _ in OUTPUTS:
        changed |= {fd for fd, source in copies if source in changed}
    return OUTPUTS - changed
