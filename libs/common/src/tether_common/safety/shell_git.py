"""git, read-only: the subcommands that only read the repository, each with the options
known not to write a file (`--output`), start a program (`--ext-diff`, `-O` pager,
`--textconv` drivers, `--show-signature` gpg) or point git at other config or code
(`-c`, `--config-env`, `--exec-path`, `--git-dir`, `--upload-pack`).

Config that git reads by itself is the sandbox's business: it gives git no config the
model can write (HOME outside the workspace, no global or system config, `.git` and
`.gitconfig`/`.gitattributes` protected names); so a read-only git command here is
read-only only together with that sandbox.
"""

from __future__ import annotations

from collections.abc import Sequence

from .shell_options import Options, Refusal, not_understood, parse, words
from .shell_words import Word

_GLOBAL_FLAGS = words(
    "--no-pager -P --no-optional-locks --literal-pathspecs --glob-pathspecs "
    "--noglob-pathspecs --icase-pathspecs --no-replace-objects"
)

# Options shared by log, show and diff (the diff and pretty-print options of git 2.3x).
_DIFF_FLAGS = words(
    "patch no-patch raw patch-with-raw patch-with-stat stat numstat shortstat summary "
    "name-only name-status compact-summary minimal patience histogram ignore-space-at-eol "
    "ignore-space-change ignore-all-space ignore-blank-lines ignore-cr-at-eol "
    "indent-heuristic no-indent-heuristic no-color color-words full-index "
    "binary text no-renames no-ext-diff no-textconv exit-code quiet no-prefix "
    "find-copies-harder irreversible-delete ita-invisible-in-index ita-visible-in-index "
    "function-context check cached staged merge-base no-index pickaxe-all pickaxe-regex "
    "no-relative color-moved-ws no-color-moved no-color-moved-ws"
)
_DIFF_VALUED = words(
    "unified inter-hunk-context diff-filter diff-algorithm anchored src-prefix dst-prefix "
    "word-diff-regex line-prefix output-indicator-new output-indicator-old output-indicator-context "
    "ignore-matching-lines skip-to rotate-to"
)
_DIFF_OPTIONAL = words(
    "stat dirstat cumulative dirstat-by-file color word-diff abbrev find-renames "
    "find-copies break-rewrites relative color-moved submodule ignore-submodules ws-error-highlight"
)
_LOG_FLAGS = words(
    "oneline all branches tags remotes reverse first-parent merges no-merges follow "
    "abbrev-commit no-abbrev-commit no-decorate graph topo-order date-order "
    "author-date-order left-right cherry-pick cherry-mark cherry boundary full-history "
    "simplify-by-decoration simplify-merges ancestry-path dense sparse source "
    "use-mailmap no-use-mailmap mailmap no-mailmap all-match invert-grep regexp-ignore-case "
    "basic-regexp extended-regexp fixed-strings perl-regexp log-size no-walk do-walk "
    "left-only right-only parents children no-min-parents no-max-parents reflog "
    "walk-reflogs count bisect no-notes show-pulls remove-empty dd combined-all-paths "
    "no-diff-merges"
)
_LOG_VALUED = words(
    "max-count skip since after until before author committer grep grep-reflog "
    "min-parents max-parents date format encoding exclude glob decorate-refs "
    "decorate-refs-exclude since-as-filter diff-merges"
)
_LOG_OPTIONAL = words("pretty decorate expand-tabs notes show-notes-by-default")

_LOG = Options(
    flags="pusRzwbaiEFPm",
    valued="nUSGLl",  # as git reads them: a separate value is the next word, even `--`
    attached="XMCB",  # optional values, attached only
    numeric=True,
    clusters=False,
    long_flags=_DIFF_FLAGS | _LOG_FLAGS,
    long_valued=_DIFF_VALUED | _LOG_VALUED,
    long_optional=_DIFF_OPTIONAL | _LOG_OPTIONAL,
)
_STATUS = Options(
    flags="sbvz",
    attached="u",
    long_flags=words(
        "short branch long verbose show-stash ahead-behind no-ahead-behind renames "
        "no-renames no-column null"
    ),
    long_optional=words("porcelain untracked-files ignored ignore-submodules column find-renames"),
)
_BLAME = Options(
    flags="bclnfpsetw",
    valued="L",
    attached="MC",
    long_flags=words(
        "root show-stats porcelain line-porcelain incremental show-name show-number "
        "show-email minimal reverse first-parent progress no-progress score-debug"
    ),
    long_valued=words("date contents ignore-rev ignore-revs-file encoding"),
    long_optional=words("abbrev color-lines color-by-age"),
)
_LS_FILES = Options(
    flags="cdmoiskuvftz",
    valued="xX",
    long_flags=words(
        "cached deleted modified others ignored stage killed unmerged directory "
        "no-empty-directory exclude-standard error-unmatch full-name recurse-submodules "
        "debug eol deduplicate sparse resolve-undo"
    ),
    long_valued=words("exclude exclude-from exclude-per-directory format with-tree"),
    long_optional=words("abbrev"),
)
_REV_PARSE = Options(
    flags="q",
    long_flags=words(
        "verify quiet sq not all branches tags remotes show-toplevel show-prefix "
        "show-cdup git-dir git-common-dir absolute-git-dir is-inside-git-dir "
        "is-inside-work-tree is-bare-repository is-shallow-repository "
        "show-superproject-working-tree show-object-format shared-index-path local-env-vars "
        "symbolic symbolic-full-name revs-only no-revs flags no-flags"
    ),
    long_valued=words("git-path since after until before default prefix path-format"),
    long_optional=words("short abbrev-ref"),
)
_SHORTLOG = Options(
    flags="nsec",
    long_flags=words("numbered summary email committer all branches tags no-merges merges"),
    long_valued=words("group format since until author"),
)
_DESCRIBE = Options(
    long_flags=words("all tags contains long always first-parent exact-match debug"),
    long_valued=words("match exclude candidates"),
    long_optional=words("abbrev dirty broken"),
)
_GREP = Options(
    flags="ivwnlLchHEFPGIaoqzrpW",
    valued="eABCm",
    dash_values="e",
    numeric=True,
    long_flags=words(
        "cached untracked no-index exclude-standard no-exclude-standard "
        "recurse-submodules text ignore-case invert-match word-regexp line-number column "
        "full-name extended-regexp basic-regexp fixed-strings perl-regexp files-with-matches "
        "name-only files-without-match count null break heading show-function "
        "function-context only-matching quiet all-match and or not no-textconv"
    ),
    long_valued=words("max-depth context after-context before-context threads max-count"),
    long_optional=words("color"),
)

SUBCOMMANDS: dict[str, Options] = {
    "log": _LOG,
    "show": _LOG,
    "diff": _LOG,
    "whatchanged": _LOG,
    "status": _STATUS,
    "blame": _BLAME,
    "ls-files": _LS_FILES,
    "rev-parse": _REV_PARSE,
    "shortlog": _SHORTLOG,
    "describe": _DESCRIBE,
    "grep": _GREP,
}
_NETWORK = words("clone fetch pull push ls-remote submodule remote archive request-pull")
_DESTRUCTIVE = words("clean reset rm gc prune filter-branch restore checkout switch stash")


def _global_options(args: Sequence[Word]) -> int | Refusal:
    """How many leading words are git's own (harmless) options."""
    index = 0
    while index < len(args) and args[index].may_be_option:
        word = args[index]
        if not word.literal:
            return "opaque", "a computed git option can change what git runs"
        if word.text not in _GLOBAL_FLAGS:
            # -c, --config-env, --exec-path, --git-dir, --work-tree, -C ... point git
            # at other config, repositories or programs.
            return "opaque", f"git option {word.text} can change what git runs"
        index += 1
    return index


def check_git(args: Sequence[Word]) -> Refusal | None:
    start = _global_options(args)
    if isinstance(start, tuple):
        return start
    if start == len(args):
        return "unknown", "git without a subcommand"
    word, rest = args[start], args[start + 1 :]
    if not word.literal:
        return "opaque", "the git subcommand is computed at run time"
    sub = word.text
    spec = SUBCOMMANDS.get(sub)
    if spec is not None:
        parsed = parse(f"git {sub}", spec, rest)
        return parsed if isinstance(parsed, tuple) else None
    if sub in _NETWORK:
        return "network", f"git {sub} talks to a remote"
    if sub in _DESTRUCTIVE:
        return "destructive", f"git {sub} can discard work"
    return (
        not_understood("git", sub)
        if sub.startswith("-")
        else (
            "write",
            f"git {sub} can change the repository or run other programs",
        )
    )
