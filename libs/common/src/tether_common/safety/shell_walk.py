"""The walk over bashlex's syntax tree: every simple command, pipeline, redirection,
substitution and function definition becomes findings in the Scope.

Two passes look at each simple command. The first decides allow or ask from the words
as written (a disguised or computed command name is never allowed). The second checks
the deny-list against the words as the program would receive them, after unwrapping
`sudo`/`timeout`/`xargs`... and after reading into `sh -c`, `eval` and other inline code.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

from .protected import glob_may_match_protected, protected_component
from .shell_commands import (
    CODE_BUILTINS,
    FETCHERS,
    READS_STDIN_CODE,
    SHELLS,
    WRAPPERS,
    category_of,
    code_arguments,
    inline_code,
    is_interpreter,
    reads_stdin_code,
    unwrap,
)
from .shell_deny import critical_tree, deny_reason, descriptor_of, write_target
from .shell_readonly import READ_ONLY, Refusal
from .shell_text import scan
from .shell_verdict import allow, ask, deny
from .shell_words import Node, Scope, Word, expand_braces, make_word, substitute

_SKIPPED = frozenset({"reservedword", "operator", "pipe"})
_WRITES = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
# Environment variables a read-only command may be given, each only with a plain value:
# a locale, zone or terminal name is looked up under system folders, but a value with
# `/` or `..` is a path (`LANGUAGE=../../ws/x` loads a message catalog the model wrote,
# `TZ=/ws/x` a zone file) and `%` starts a format some programs expand.
_NAMED_VARIABLE = re.compile(
    r"LC_[A-Z]+|LANG|LANGUAGE|TZ|COLUMNS|LINES|NO_COLOR|FORCE_COLOR|CLICOLOR|TERM"
)
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.,:@+-]{0,64}")
# Variables of the shell itself: a plain `x=...` on its own line is not exported (the
# sandbox's environment holds no lower-case names) and reaches no program.
_SHELL_VARIABLE = re.compile(r"[a-z_][a-z0-9_]*")
_PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "ftp_proxy", "all_proxy", "no_proxy"})


def walk(node: Node, scope: Scope) -> frozenset[str]:
    """Walk one node; return the names of the commands it runs."""
    kind = node.kind
    if kind == "command":
        return _command(node, scope)
    if kind == "pipeline":
        return _pipeline(node, scope)
    if kind == "function":
        return _function(node, scope)
    if kind == "word":
        return make_word(node, scope, walk).sub_names
    names: frozenset[str] = frozenset()
    for child in getattr(node, "parts", None) or getattr(node, "list", None) or []:
        if child.kind not in _SKIPPED:
            names |= walk(child, scope)
    for redirect in getattr(node, "redirects", None) or []:
        _redirect(redirect, scope)
    return names


def _pipeline(node: Node, scope: Scope) -> frozenset[str]:
    stages = [walk(part, scope) for part in node.parts if part.kind not in _SKIPPED]
    for index, stage in enumerate(stages):
        later = frozenset().union(*stages[index + 1 :])
        if stage & FETCHERS and READS_STDIN_CODE in later:
            scope.add(
                deny("pipes content downloaded from the network into an interpreter", "network")
            )
            break
    return frozenset().union(*stages)


def _function(node: Node, scope: Scope) -> frozenset[str]:
    # `f() { ...; }` starts with the name; `function f { ...; }` with a reserved word.
    name = str(next(part.word for part in node.parts if part.kind == "word"))
    scope.add(ask("opaque", f"defines the shell function {name}"))
    body = node.parts[-1]
    names = walk(body, scope)
    if name in names and _spawns(body):
        scope.add(deny(f"{name} calls itself in the background or a pipe: a fork bomb"))
    return names


def _spawns(node: Node) -> bool:
    if node.kind == "pipe" or (node.kind == "operator" and node.op == "&"):
        return True
    children = getattr(node, "parts", None) or getattr(node, "list", None) or []
    return any(_spawns(child) for child in children)


def _command(node: Node, scope: Scope) -> frozenset[str]:
    words: list[Word] = []
    bodies: list[str] = []
    assignments: list[Node] = []
    subs: frozenset[str] = frozenset()
    for part in node.parts:
        if part.kind == "word":
            words.append(make_word(part, scope, walk))
        elif part.kind == "assignment":
            assignments.append(part)
        elif part.kind == "redirect":
            body, names = _redirect(part, scope)
            subs |= names
            bodies.extend([body] if body is not None else [])
    for assignment in assignments:
        subs |= _assignment(assignment, scope, standalone=not words)
    if not words:
        return subs
    names = _classify(words, scope)
    _deny_pass(_deny_view(words, scope), scope)
    subs |= frozenset().union(*(word.sub_names for word in words))
    if READS_STDIN_CODE in names:
        if subs & FETCHERS:  # bash < <(curl ...), bash <<< "$(curl ...)"
            scope.add(deny("runs code downloaded from the network", "network"))
        _feed_bodies(names, bodies, scope)
    _track_state(words, scope)
    return names | subs


def _assignment(node: Node, scope: Scope, *, standalone: bool) -> frozenset[str]:
    word = make_word(node, scope, walk)
    name, _, value = word.text.partition("=")
    name = name.rstrip("+")
    refusal = _assignment_refusal(name, value, word, standalone=standalone)
    if refusal is not None:
        scope.add(ask("opaque", refusal))
    if standalone and word.literal:
        scope.variables[name] = value
    elif standalone:
        scope.variables.pop(name, None)
    if word.sub_names & FETCHERS:
        scope.tainted.add(name)
    return word.sub_names


def _assignment_refusal(name: str, value: str, word: Word, *, standalone: bool) -> str | None:
    """Why setting `name` needs an operator, or None when it is plainly harmless."""
    if _NAMED_VARIABLE.fullmatch(name):
        if not word.literal or not _PLAIN_VALUE.fullmatch(value) or ".." in value:
            return f"sets {name} to a value that is not a plain name, which can make a program read a file"
        return None
    if not standalone:
        return f"gives {name} to the command, which changes what it does"
    if not _SHELL_VARIABLE.fullmatch(name) or name in _PROXY_VARIABLES:
        return f"sets {name}, which changes what later commands do"
    return None


def _downloaded(word: Word, scope: Scope) -> bool:
    """True when a word is text from the network: `$(curl ..)`, or `$x` after x=$(curl ..)."""
    if word.sub_names & FETCHERS:
        return True
    return word.expanded and any(
        f"${name}" in word.text or f"${{{name}}}" in word.text for name in scope.tainted
    )


def _redirect(node: Node, scope: Scope) -> tuple[str | None, frozenset[str]]:
    heredoc = getattr(node, "heredoc", None)
    if heredoc is not None:
        return str(heredoc.value).rsplit("\n", 1)[0], frozenset()
    target = node.output
    if not hasattr(target, "kind"):
        return None, frozenset()  # a descriptor: 2>&1, >&2, >&-
    word = make_word(target, scope, walk)
    if node.type == "<<<":
        return word.text, word.sub_names
    _check_protected([word], scope)
    if node.type in _WRITES:
        _write_target(word, scope)
    elif word.literal and write_target(word.text) == "network":
        scope.add(ask("network", f"opens a network connection through {word.text}"))
    return None, word.sub_names


def _write_target(word: Word, scope: Scope) -> None:
    if not word.literal:
        scope.add(ask("write", "writes to a file whose name is computed at run time"))
        return
    target = write_target(word.text)
    if target == "descriptor" and descriptor_of(word.text) not in scope.outputs:
        scope.add(ask("write", f"writes through {word.text}, which reopens whatever file it holds"))
    elif target == "network":
        scope.add(ask("network", f"opens a network connection through {word.text}"))
    elif target == "disk":
        scope.add(deny(f"writes to the raw disk {word.text}"))
    elif target == "system":
        scope.add(deny(f"overwrites the system file {word.text}"))
    elif target == "file":
        scope.add(ask("write", f"writes to the file {word.text}"))


def _check_protected(words: Sequence[Word], scope: Scope) -> None:
    for word in words:
        texts = substitute(word.text, scope.variables) if word.expanded else [word.text]
        for text in texts:
            hit = _protected_hit(text, glob=word.glob)
            if hit:
                scope.add(ask("protected", f"names the protected file {hit}"))


def _protected_hit(text: str, *, glob: bool) -> str | None:
    if glob:
        # Brace lists first, as bash does: `{.git,x}/config` is `.git/config x/config`.
        hits = (glob_may_match_protected(choice) for choice in expand_braces(text))
        return text if any(hits) else None
    if any(char in text for char in "*?["):
        return None  # a quoted pattern (find -name '*.pem') names no file
    hit = protected_component(re.split(r"[/=]", text))
    if hit is None and text.startswith("-") and not text.startswith("--"):
        # A value attached to a short option: `grep -f.env`, `date -nf.env`.
        suffixes = (text[start:] for start in range(2, min(len(text), 34)))
        hit = next(
            filter(None, (protected_component(re.split(r"[/=]", s)) for s in suffixes)), None
        )
    return hit


def _classify(words: Sequence[Word], scope: Scope) -> frozenset[str]:
    """First pass: allow or ask for one simple command; returns the names it runs."""
    head, args = words[0], words[1:]
    if not head.literal:
        scope.add(ask("opaque", "the command name is computed at run time, so what runs is unseen"))
        return frozenset()
    disguised = head.source != head.text
    if disguised:
        scope.add(ask("opaque", f"the command name {head.source} is quoted or escaped"))
    if "/" in head.text:
        scope.add(ask("opaque", f"runs a program by its path ({head.text})"))
    name = posixpath.basename(head.text) or head.text
    _check_protected(args, scope)
    plain = not disguised and "/" not in head.text
    return frozenset({name}) | _classify_named(name, args, scope, plain=plain)


def _classify_named(
    name: str, args: Sequence[Word], scope: Scope, *, plain: bool
) -> frozenset[str]:
    wrapper = WRAPPERS.get(name)
    if wrapper is not None:
        scope.add(ask(wrapper.category, f"{name} runs another command"))
        unwrapped = unwrap(wrapper, [arg.text for arg in args])
        if unwrapped.codes:
            scope.add(ask("opaque", f"{name} runs a command string"))
        if unwrapped.inner is None:
            return frozenset()
        return _classify(args[unwrapped.inner :], scope)
    if is_interpreter(name) or name in CODE_BUILTINS:
        return _interpreter(name, args, scope)
    check = READ_ONLY.get(name)
    if check is not None and plain:
        if name == "git" and scope.cwd_moved:
            # Elsewhere git may find a repository the model made, with its own config
            # (drivers, pagers). In the workspace root it finds `.git`, a protected
            # name (a bare repository made at the root is the sandbox's to refuse).
            scope.add(ask("opaque", "git after cd may read a repository's config it should not"))
            return frozenset()
        _read_only(name, check(args), scope)
        return frozenset()
    known = category_of(name)
    if known is not None:
        scope.add(ask(known[0], f"{name} {known[1]}"))
    elif check is None:
        scope.add(ask("unknown", f"{name} is not on the list of commands known to be safe"))
    return frozenset()


def _interpreter(name: str, args: Sequence[Word], scope: Scope) -> frozenset[str]:
    scope.add(ask("opaque", f"{name} runs code that cannot be checked"))
    texts = [arg.text for arg in args]
    if any(_downloaded(args[index], scope) for index in code_arguments(name, texts)):
        scope.add(deny("runs code downloaded from the network", "network"))
    return frozenset({READS_STDIN_CODE}) if reads_stdin_code(name, texts) else frozenset()


def _read_only(name: str, refusal: Refusal | None, scope: Scope) -> None:
    if refusal is not None:
        scope.add(ask(*refusal))
    else:
        scope.add(allow(f"{name} only reads"))


def _deny_view(words: Sequence[Word], scope: Scope) -> list[str]:
    """The argv the program would receive, as far as literal text and known variables go."""
    argv: list[str] = []
    for word in words:
        texts = substitute(word.text, scope.variables) if word.expanded else [word.text]
        for text in texts:
            argv.extend(expand_braces(text) if word.glob else [text])
    return argv


def _deny_pass(argv: Sequence[str], scope: Scope) -> None:
    """Second pass: the deny-list, through wrappers and into inline code."""
    if not argv:
        return
    name, args = posixpath.basename(argv[0]), argv[1:]
    reason = deny_reason(name, args, cwd_critical=scope.cwd_critical)
    if reason:
        scope.add(deny(reason))
    wrapper = WRAPPERS.get(name)
    if wrapper is not None:
        unwrapped = unwrap(wrapper, args)
        for code in unwrapped.codes:
            scope.add_nested(code)
        if unwrapped.inner is not None:
            _deny_pass(args[unwrapped.inner :], scope)
    elif name in SHELLS or name == "eval":
        for code in [" ".join(args)] if name == "eval" else inline_code(name, args):
            scope.add_nested(code)
    elif is_interpreter(name):
        for code in inline_code(name, args):
            scope.findings.extend(deny(found) for found in scan(code))
    elif name == "alias":
        for definition in args:
            scope.add_nested(definition.partition("=")[2])
    elif name == "find":
        for inner in _find_commands(args):
            _deny_pass(inner, scope)


def _find_commands(args: Sequence[str]) -> list[Sequence[str]]:
    commands: list[Sequence[str]] = []
    for index, arg in enumerate(args):
        if arg in {"-exec", "-execdir", "-ok", "-okdir"}:
            rest = args[index + 1 :]
            end = next((i for i, a in enumerate(rest) if a in {";", "+"}), len(rest))
            commands.append(rest[:end])
    return commands


def _feed_bodies(names: frozenset[str], bodies: Sequence[str], scope: Scope) -> None:
    """Here-documents and here-strings fed to an interpreter are code: look inside."""
    for body in bodies:
        if names & SHELLS:
            scope.add_nested(body)
        else:
            scope.findings.extend(deny(found) for found in scan(body))


_DECLARERS = frozenset({"export", "declare", "typeset", "local", "readonly"})


def _track_state(words: Sequence[Word], scope: Scope) -> None:
    """Remember what later commands depend on: a `cd` to `/` or home (so `rm -rf *`
    there is fatal) and literal values given with `export NAME=value` and the like."""
    head = words[0].text
    if head in {"cd", "pushd", "popd"}:
        target = words[1].text if len(words) > 1 else "~"
        scope.cwd_critical = critical_tree(target)
        scope.cwd_moved = True
    elif head in _DECLARERS:
        for word in words[1:]:
            name, equals, value = word.text.partition("=")
            if equals and word.literal:
                scope.variables[name] = value
