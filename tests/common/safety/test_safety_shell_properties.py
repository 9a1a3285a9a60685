"""Property tests: the shell classifier never raises and never loosens under composition."""

from __future__ import annotations

import shlex
from collections.abc import Callable

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tether_common.safety.shell import ShellVerdict, classify
from tether_common.safety.shell_text import normalise, scan

_SHELL_ALPHABET = st.sampled_from(
    [
        *"abcdefghijklmnopqrstuvwxyz/.-_~*?[]{},;&|<>()$`'\"\\ \n\t=!#%:0123456789",
        *["rm", " -rf ", "$(", "<(", "${IFS}", "sudo ", "sh -c ", "curl x | sh", "/dev/sda"],
    ]
)
_SHELLISH = st.lists(_SHELL_ALPHABET, max_size=40).map("".join)
_SETTINGS = settings(max_examples=300, deadline=None, database=None)


def _well_formed(verdict: ShellVerdict) -> None:
    assert verdict.decision in {"allow", "ask", "deny"}
    assert verdict.reasons
    assert all(isinstance(reason, str) and reason for reason in verdict.reasons)
    assert verdict.opaque == ("opaque" in verdict.categories)


@_SETTINGS
@given(st.text(max_size=300))
def test_classify_never_raises_on_any_text(command: str) -> None:
    _well_formed(classify(command))


@_SETTINGS
@given(_SHELLISH)
def test_classify_never_raises_on_shell_like_text(command: str) -> None:
    _well_formed(classify(command))


@_SETTINGS
@given(_SHELLISH)
def test_deny_is_kept_whatever_precedes(prefix: str) -> None:
    # A trailing backslash joins the lines (`a\` + `rm` is `arm`): rightly not a deny.
    assume(not prefix.endswith("\\"))
    assert classify(prefix + "\nrm -rf /").decision == "deny"


@_SETTINGS
@given(_SHELLISH)
def test_allow_never_survives_a_prepended_substitution(command: str) -> None:
    # Anything after an opaque part can never be "allow": opaque means ask at least.
    assert classify("echo $(id); " + command).decision != "allow"


@_SETTINGS
@given(_SHELLISH)
def test_deny_is_kept_whatever_follows(suffix: str) -> None:
    assert classify("rm -rf / ; " + suffix).decision == "deny"


@_SETTINGS
@given(st.text(max_size=300))
def test_text_layer_never_raises(text: str) -> None:
    assert isinstance(scan(text), list)
    assert isinstance(normalise(text), str)


def test_very_long_input_asks_without_parsing() -> None:
    verdict = classify("ls " + "a" * 50_000)
    assert verdict.decision == "ask"


def test_very_long_input_still_sees_the_deny_list() -> None:
    assert classify("rm -rf / " + "a" * 50_000).decision == "deny"


@pytest.mark.parametrize("quote", [shlex.quote, repr])
def test_deeply_nested_shells_still_deny(quote: Callable[[str], str]) -> None:
    command = "rm -rf /"
    for _ in range(10):
        command = "sh -c " + quote(command)
    assert classify(command).decision == "deny"


def test_deeply_nested_parentheses_do_not_crash() -> None:
    verdict = classify("(" * 2000 + "ls" + ")" * 2000)
    _well_formed(verdict)
    assert verdict.decision in ("allow", "ask", "deny")


def test_many_brace_lists_stay_bounded() -> None:
    verdict = classify("rm -rf " + "{a,b}" * 40)
    _well_formed(verdict)
    assert verdict.decision != "allow"
