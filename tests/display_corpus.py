"""Tricky names for the display tests (`tether_common.display`): each code point class
that draws nothing or reorders text, alone and mixed, with what a reader must be shown;
and visible text in many scripts that must be left as it is."""

from __future__ import annotations

# Tricky names and what a reader must see of them.
CORPUS = [
    ("invoice\u202egpj.sh", "invoice⟨U+202E⟩gpj.sh"),  # RLO: reads invoicehs.jpg
    ("report\u202dfdp.exe", "report⟨U+202D⟩fdp.exe"),  # LRO
    ("a\u202ab\u202bc\u202cd", "a⟨U+202A⟩b⟨U+202B⟩c⟨U+202C⟩d"),  # LRE, RLE, PDF
    ("\u2066admin\u2069.txt", "⟨U+2066⟩admin⟨U+2069⟩.txt"),  # LRI … PDI
    ("\u2067x\u2068y\u2069", "⟨U+2067⟩x⟨U+2068⟩y⟨U+2069⟩"),  # RLI, FSI
    ("left\u200eright\u200f", "left⟨U+200E⟩right⟨U+200F⟩"),  # LRM, RLM
    ("arabic\u061cmark", "arabic⟨U+061C⟩mark"),  # ALM
    ("pay\u200bpal", "pay⟨U+200B⟩pal"),  # zero width space
    ("zw\u200cnj\u200dj", "zw⟨U+200C⟩nj⟨U+200D⟩j"),  # ZWNJ, ZWJ
    ("👨\u200d👩\u200d👧", "👨⟨U+200D⟩👩⟨U+200D⟩👧"),  # ZWJ in an emoji family
    ("\ufeffconfig.yaml", "⟨U+FEFF⟩config.yaml"),  # BOM
    ("word\u2060joiner", "word⟨U+2060⟩joiner"),
    ("tag\U000e0041\U000e0042\U000e007f", "tag⟨U+E0041⟩⟨U+E0042⟩⟨U+E007F⟩"),  # tag chars
    ("vs\ufe0f\U000e0100", "vs⟨U+FE0F⟩⟨U+E0100⟩"),  # variation selectors
    ("cgj\u034fhere", "cgj⟨U+034F⟩here"),  # combining grapheme joiner
    ("\u3164\u115f\u1160\uffa0", "⟨U+3164⟩⟨U+115F⟩⟨U+1160⟩⟨U+FFA0⟩"),  # Hangul fillers
    ("soft\u00adhyphen", "soft⟨U+00AD⟩hyphen"),
    ("line\u2028para\u2029end", "line⟨U+2028⟩para⟨U+2029⟩end"),
    ("esc\x1b[2Jbell\x07cr\r", "esc⟨U+001B⟩[2Jbell⟨U+0007⟩cr⟨U+000D⟩"),
    ("del\x7fcsi\x9b", "del⟨U+007F⟩csi⟨U+009B⟩"),
    ("private\ue000\U000f0000", "private⟨U+E000⟩⟨U+F0000⟩"),
    ("lone\ud800", "lone⟨U+D800⟩"),
    ("khmer\u17b4mongol\u180e", "khmer⟨U+17B4⟩mongol⟨U+180E⟩"),
    ("⟨U+202E⟩", "⟨U+27E8⟩U+202E⟩"),  # the escape written out is not the code point
    ("mixed\u202e\u2066\u200d\ufeff\U000e0020.js", "mixed⟨U+202E⟩⟨U+2066⟩⟨U+200D⟩⟨U+FEFF⟩⟨U+E0020⟩.js"),
]  # fmt: skip
# Visible text in many scripts: left exactly as it is.
PLAIN = [
    "café résumé",
    "e\u0301 (a combining acute on its letter)",
    "日本語のファイル.txt",
    "עברית ועוד",  # right-to-left letters are visible; only the controls are escaped
    "العربية",
    "Ελληνικά Русский हिन्दी ไทย",
    "tab\tand\nnewline",
    "emoji 😀 ❤",
    "a\u00a0b\u2003c\u202fd",  # spaces are visible as spaces
    "math ⟩ ⟪",
]
# What the services take (no lone surrogates: PostgreSQL cannot store them).
SERVICE_CORPUS = [(name, seen) for name, seen in CORPUS if "\ud800" not in name]
