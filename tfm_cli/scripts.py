"""Writing systems that put no spaces between words: Chinese, Japanese, Thai, Lao, Khmer, Myanmar.

Where text has no spaces, a "word" cannot be found by splitting on them: BLEU needs another tokenizer
(`tfm_cli.scoring`) and word-level attention takes each subword piece as its own unit (`tfm_cli.attention`).
Korean is written with spaces and is not one of them.
"""

from __future__ import annotations

# Unicode blocks (code point ranges, inclusive)
HAN = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x323AF))  # ideographs and extensions
KANA = ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F))  # hiragana, katakana (and half-width)
SOUTHEAST_ASIAN = ((0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF))  # Thai and Lao; Myanmar; Khmer
HANGUL = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xAC00, 0xD7AF), (0xD7B0, 0xD7FF))  # Korean


def hangul(ch: str) -> bool:
    """Whether `ch` is a Korean letter (a syllable or a jamo): spaced, but scored by its own BLEU tokenizer."""
    code = ord(ch)
    return any(low <= code <= high for low, high in HANGUL)


def script_of(ch: str) -> str:
    """"han", "kana" or "southeast-asian" for a character of those scripts, else "" (spaced, or not a letter)."""
    code = ord(ch)
    if code < 0x0E00:  # Latin, Greek, Cyrillic, Arabic, Hebrew, Devanagari...: written with spaces
        return ""
    for name, ranges in (("han", HAN), ("kana", KANA), ("southeast-asian", SOUTHEAST_ASIAN)):
        if any(low <= code <= high for low, high in ranges):
            return name
    return ""


def unspaced(ch: str) -> bool:
    """Whether `ch` belongs to a script written without spaces between words."""
    return bool(script_of(ch))
