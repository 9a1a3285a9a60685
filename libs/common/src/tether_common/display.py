"""What a reader is shown of text a model, a tool or a user wrote: every code point that
draws nothing or reorders what is drawn around it, written out as a visible `⟨U+202E⟩`.

Without it `invoice\\u202egpj.sh` reads `invoicehs.jpg` on a page and in a terminal. The
class (`RANGES`) is, for Unicode 14.0 (Python 3.11's): the categories Cc (but newline and
tab), Cf (bidi controls, zero-width characters, the BOM, tag characters …), Co (private
use: no agreed glyph), Cs (lone surrogates), Zl and Zp, plus Unicode's
Default_Ignorable_Code_Point (variation selectors, the combining grapheme joiner, the
Hangul fillers …). The escape's own opening bracket is escaped too, so a shown text is
never ambiguous: `⟨U+202E⟩` on screen is always the one code point, never those nine
characters. Visible marks are untouched (a combining acute still sits on its letter).

This is the one definition: the CLI and the services call `shown`, and the operator pages
get the same class as a JavaScript pattern (`js_pattern`), put into their shared script
kit when `tether_common.pages` assembles them. `tests/common/test_display.py` checks the
table against `unicodedata`.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["INVISIBLE", "MARK", "RANGES", "escape", "js_pattern", "shown", "shown_data"]

# Inclusive code point ranges, sorted; `tests/common/test_display.py` derives them again.
RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x0008),  # C0 controls before tab
    (0x000B, 0x001F),  # C0 controls after newline (carriage return, escape …)
    (0x007F, 0x009F),  # delete and the C1 controls (0x9b is a CSI on some terminals)
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x0600, 0x0605),  # Arabic number signs (prepended format characters)
    (0x061C, 0x061C),  # Arabic letter mark (bidi)
    (0x06DD, 0x06DD),  # Arabic end of ayah
    (0x070F, 0x070F),  # Syriac abbreviation mark
    (0x0890, 0x0891),  # Arabic pound and piastre marks above
    (0x08E2, 0x08E2),  # Arabic disputed end of ayah
    (0x115F, 0x1160),  # Hangul choseong and jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian variation selectors and vowel separator
    (0x200B, 0x200F),  # zero width space, non-joiner, joiner; LRM, RLM
    (0x2028, 0x202E),  # line and paragraph separators; LRE, RLE, PDF, LRO, RLO
    (0x2060, 0x206F),  # word joiner, invisible operators, LRI, RLI, FSI, PDI, deprecated
    (0x3164, 0x3164),  # Hangul filler
    (0xD800, 0xF8FF),  # surrogates, then the private use area
    (0xFE00, 0xFE0F),  # variation selectors 1-16
    (0xFEFF, 0xFEFF),  # zero width no-break space (BOM)
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFFB),  # reserved ignorables; interlinear annotation controls
    (0x110BD, 0x110BD),  # Kaithi number sign
    (0x110CD, 0x110CD),  # Kaithi number sign above
    (0x13430, 0x13438),  # Egyptian hieroglyph format controls
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol beam and tie format controls
    (0xE0000, 0xE0FFF),  # tag characters, variation selectors 17-256, reserved ignorables
    (0xF0000, 0xFFFFD),  # supplementary private use area A
    (0x100000, 0x10FFFD),  # supplementary private use area B
)
# Opens every escape, so it is escaped itself (U+27E8 MATHEMATICAL LEFT ANGLE BRACKET).
MARK = "\u27e8"


def _class(ranges: tuple[tuple[int, int], ...], extra: str = "") -> str:
    spans = "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)
    return f"[{spans}{re.escape(extra)}]"


INVISIBLE = re.compile(_class(RANGES))
_ESCAPED = re.compile(_class(RANGES, MARK))


def escape(char: str) -> str:
    """One code point as it is shown: `⟨U+202E⟩` (at least four hex digits)."""
    return f"{MARK}U+{ord(char):04X}\u27e9"


def shown(text: str) -> str:
    """`text` with every invisible or reordering code point (and `MARK`) escaped; newline
    and tab stay, and text without any comes back unchanged."""
    return _ESCAPED.sub(lambda found: escape(found.group()), text)


def shown_data(value: Any) -> Any:
    """`value` (JSON-like data) with every string in it, keys too, `shown`."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {shown(str(k)): shown_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shown_data(v) for v in value]
    return value


def js_pattern() -> str:
    """The same class as `shown` escapes, as the source of a JavaScript `RegExp` with the
    `u` flag (code points, so astral ranges and lone surrogates match as in Python)."""
    spans = "".join(f"\\u{{{a:X}}}-\\u{{{b:X}}}" for a, b in RANGES)
    return f"[{spans}\\u{{{ord(MARK):X}}}]"
