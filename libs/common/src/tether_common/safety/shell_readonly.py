"""The closed allow-list of read-only commands, each with the check that keeps it read-only.

A command is "allow" only if it is named here and its check understands every word it
was given; a check returns the category and reason that make the command ask instead.
Two kinds of entry:

- `_ANY_OPTION`: tools none of whose options (GNU coreutils 9, grep 3, procps, util-linux,
  jq 1.6-1.7, bash builtins) can write a file or start a program; they only choose what
  is printed and which files are read. Any argument, computed or not, is harmless.
- the rest: an allow-list of option spellings (`shell_options`), or a parser of the
  small language the command takes (sed scripts, find expressions, awk programs, test
  expressions, git subcommands). Anything not on the list asks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .shell_commands import names
from .shell_find import check_awk, check_find
from .shell_git import check_git
from .shell_options import Options, Refusal, parse, words
from .shell_sed import check_sed
from .shell_test import check_test
from .shell_words import Word

__all__ = ["READ_ONLY", "Check", "Refusal"]

Check = Callable[[Sequence[Word]], Refusal | None]

_ANY_OPTION = names(
    "ls cat head tail wc grep egrep fgrep pwd echo whoami id groups uname arch nproc "
    "uptime free df du stat which type whereis basename dirname realpath readlink cut tr "
    "cmp nl tac rev fold column paste comm join expand unexpand md5sum sha1sum sha224sum "
    "sha256sum sha384sum sha512sum b2sum cksum base64 base32 od hexdump strings seq true "
    "false sleep cd jq ps getconf locale tty cal exit"
)


def _allowed(_args: Sequence[Word]) -> Refusal | None:
    return None


def _options(name: str, spec: Options, operands: int | None = None) -> Check:
    """A check that understands the options in `spec` and at most `operands` operands."""

    def check(args: Sequence[Word]) -> Refusal | None:
        parsed = parse(name, spec, args)
        if isinstance(parsed, tuple):
            return parsed
        if operands is not None and len(parsed.operands) > operands:
            return "write", f"{name} writes its output to the last file named"
        return None

    return check


# GNU diff 3: not -l/--paginate (runs pr); -D/--ifdef and the format options are left
# out as rarely needed.
_DIFF = Options(
    flags="iEZbwBatTrNuqsepcdy",
    valued="CUFIxXSW",
    long_flags=words(
        "ignore-case ignore-tab-expansion ignore-trailing-space ignore-space-change "
        "ignore-all-space ignore-blank-lines strip-trailing-cr text recursive new-file "
        "unidirectional-new-file brief report-identical-files expand-tabs initial-tab "
        "minimal speed-large-files side-by-side left-column suppress-common-lines "
        "show-c-function no-dereference suppress-blank-empty normal help version"
    ),
    long_valued=words(
        "label from-file to-file exclude exclude-from ignore-matching-lines "
        "show-function-line starting-file width tabsize palette horizon-lines"
    ),
    long_optional=words("unified context color"),
)
# GNU sort: not -o/--output, -T/--temporary-directory, --compress-program.
_SORT = Options(
    flags="bdfgiMhnRrVcCmsuz",
    valued="ktS",
    long_flags=words(
        "ignore-leading-blanks dictionary-order ignore-case general-numeric-sort "
        "human-numeric-sort ignore-nonprinting month-sort numeric-sort random-sort reverse "
        "version-sort merge stable unique zero-terminated debug help version"
    ),
    long_valued=words("key field-separator buffer-size parallel sort random-source files0-from"),
    long_optional=words("check"),
)
_UNIQ = Options(
    flags="cdiuzD",
    valued="fsw",
    long_flags=words("count repeated ignore-case unique zero-terminated help version"),
    long_valued=words("skip-fields skip-chars check-chars"),
    long_optional=words("all-repeated group"),
)
# tree 2: not -o (output file), -R/-H (HTML files written into every folder), --fromfile.
_TREE = Options(
    flags="adlfxACDFJNQSXcghinpqrstuUv",
    valued="LPI",
    long_flags=words(
        "noreport dirsfirst filesfirst prune matchdirs ignore-case du si inodes device "
        "gitignore help version"
    ),
    long_valued=words("filelimit charset timefmt sort"),
)
# file 5: not -C/--compile (writes magic.mgc), -z/-Z (runs decompressors), -d (debug).
_FILE = Options(
    flags="bchiklLNnprsS0E",
    valued="efFmP",
    long_flags=words(
        "brief mime mime-type mime-encoding keep-going dereference no-dereference no-pad "
        "print0 raw special-files extension apple no-sandbox preserve-date help version"
    ),
    long_valued=words("exclude exclude-quiet files-from separator magic-file parameter"),
)
_DATE = Options(
    flags="uR",
    valued="dfr",
    attached="I",
    dash_values="d",
    long_flags=words("utc universal rfc-email rfc-2822 debug resolution help version"),
    long_valued=words("date file reference rfc-3339"),
    long_optional=words("iso-8601"),
)
# ripgrep 13-14 (no abbreviations): not --pre/--pre-glob (run a program per file),
# -z/--search-zip (runs decompressors), --hostname-bin (runs a program).
_RG = Options(
    flags="iSsvwxFnNHIlcoqLaUPu0b.p",
    valued="eEgtTABCmMjdfr",
    dash_values="e",
    numeric=True,
    long_flags=words(
        "ignore-case smart-case case-sensitive invert-match word-regexp line-regexp "
        "fixed-strings line-number no-line-number with-filename no-filename "
        "files-with-matches files-without-match files count count-matches only-matching "
        "quiet hidden no-hidden no-ignore no-ignore-vcs no-ignore-dot no-ignore-parent "
        "no-ignore-global no-ignore-exclude no-ignore-files follow text multiline "
        "multiline-dotall pcre2 json vimgrep heading no-heading column no-column "
        "byte-offset trim stats null null-data passthru passthrough unrestricted "
        "no-messages no-config debug one-file-system binary crlf sort-files mmap no-mmap "
        "type-list line-buffered block-buffered include-zero no-unicode pretty "
        "max-columns-preview no-require-git help version"
    ),
    long_valued=words(
        "regexp file glob iglob type type-not type-add type-clear max-count max-depth "
        "max-filesize after-context before-context context threads encoding replace "
        "context-separator field-match-separator field-context-separator path-separator "
        "sort sortr engine max-columns colors ignore-file dfa-size-limit regex-size-limit"
    ),
    long_optional=words("color"),
)
_HOSTNAME = Options(
    flags="sfiIdAa",
    long_flags=words(
        "short fqdn long ip-address all-ip-addresses domain alias all-fqdns help version"
    ),
)
_SET_READ = frozenset(
    {"-e", "-u", "-x", "+e", "+u", "+x", "-o", "+o", "pipefail", "-eu", "-ex", "-euo", "-eux"}
)


def _check_date(args: Sequence[Word]) -> Refusal | None:
    parsed = parse("date", _DATE, args)
    if isinstance(parsed, tuple):
        return parsed
    if any(not (word.literal and word.text.startswith("+")) for word in parsed.operands):
        return "privileged", "date with an argument other than +FORMAT sets the clock"
    return None


def _check_hostname(args: Sequence[Word]) -> Refusal | None:
    parsed = parse("hostname", _HOSTNAME, args)
    if isinstance(parsed, tuple):
        return parsed
    return (
        ("privileged", "hostname with an argument sets the host name") if parsed.operands else None
    )


def _check_set(args: Sequence[Word]) -> Refusal | None:
    # Bare `set` prints every variable; other options change how later words expand.
    if not args or any(not (arg.literal and arg.text in _SET_READ) for arg in args):
        return "opaque", "set with these options changes the shell"
    return None


def _check_printf(args: Sequence[Word]) -> Refusal | None:
    # printf -v NAME assigns a variable: PATH, or an array element whose subscript runs
    # commands. Options come only first, and -v is printf's only option.
    if args and args[0].may_be_option and not (args[0].literal and args[0].text == "--"):
        return "opaque", "printf options (-v) assign variables"
    return None


READ_ONLY: Mapping[str, Check] = {
    **dict.fromkeys(_ANY_OPTION, _allowed),
    "find": check_find,
    "git": check_git,
    "sed": check_sed,
    "awk": check_awk,
    "gawk": check_awk,
    "mawk": check_awk,
    "nawk": check_awk,
    "test": check_test,
    "[": lambda args: check_test(args, bracket=True),
    "printf": _check_printf,
    "diff": _options("diff", _DIFF),
    "sort": _options("sort", _SORT),
    "uniq": _options("uniq", _UNIQ, operands=1),
    "tree": _options("tree", _TREE),
    "file": _options("file", _FILE),
    "rg": _options("rg", _RG),
    "date": _check_date,
    "hostname": _check_hostname,
    "set": _check_set,
}
