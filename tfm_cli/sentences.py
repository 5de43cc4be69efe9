"""Sentence splitting for translation: a line that holds several sentences is translated one sentence at a time.

A model trained on sentence pairs (Tatoeba, most of WMT) ends its output after the first sentence of a line that
holds several: the quickstart model translated 200 lines of three dev sentences each at 8.1 BLEU, and the same
sentences one at a time, joined again, at 50.7. Translation tools for end users (Argos Translate, LibreTranslate,
OPUS-MT's servers) split their input for this reason; research toolkits (fairseq, Marian, CTranslate2) leave it to
a preprocessing script. `tfm translate` splits by default (`--no-split-sentences`, a recipe's
`decode.split_sentences: false`, or `split_sentences=False` keep a line whole).

The rules follow Moses' split-sentences.perl (Koehn and Schroeder) without knowing the language, so they are
cautious: where a break is in doubt the line is not broken there, which is what translating it whole did.

- A break follows `.`, `!`, `?`, `…` (and their runs, `?!`, `...`), then any closing quotes or brackets (with
  French spacing: `? »`), then white space, then the start of a sentence: after any opening quotes, brackets or
  Spanish `¿ ¡`, an upper-case letter, a digit, or a letter of a script without case (Arabic, Hebrew, Devanagari,
  CJK...). So `« Où es-tu ? » demanda-t-elle.` stays whole (lower case follows).
- After `.`, no break where the word before is a single letter (initials: `J. K. Rowling`, `M. Dupont`), a dotted
  abbreviation (`U.S.`, `e.g.`, `z.B.`, `Ph.D.`), a doubled initial (`EE. UU.`), a Roman numeral (`Louis XIV.`),
  a number of one or two digits (ordinals in German, the Nordic and Slavic languages: `am 3. Oktober`), or one of
  the common abbreviations below (`Mr.`, `Dr.`, `Mme.`, `Sra.`, `Prof.`, `etc.`...; `No.`, `pp.`, `Art.`, `Jan.`...
  only before a number).
- Full stops of scripts that need no space after them (`。！？`, Devanagari `।`, Arabic `؟`, Urdu `۔`, Ethiopic `።`,
  Armenian `։`) break without one, except right after a closing quote (`「どこ？」と言った`).
- Never inside quotes or brackets: a break is made only where the quotes before it are balanced (an even number of
  `"`, of guillemets, of curly double quotes, of corner brackets) and no parenthesis is open, so `"Où es-tu ? Je
  t'attends." dit-il.` stays whole.

`join_sentences` puts the translations back on one line: a space between them, none where either side is Chinese
or Japanese text (`我很累。我要睡觉。`).
"""

from __future__ import annotations

import re

# Ends of a sentence that white space must follow, and those of scripts that need none after them.
_STOPS = ".!?…‼⁇⁈⁉‽"
_FULL_STOPS = "。！？｡।॥؟۔።։"
_CLOSING = "\"'»«”“’‘›‹」』）〕】)]}"
_OPENING = "\"'«»“‘„‚‹›「『（〔【([{¿¡"

# Candidate breaks: terminators, closing quotes or brackets (French puts a space before its `»`), white space.
_CANDIDATE = re.compile(
    rf"(?P<stop>[{re.escape(_STOPS)}]+|[{_FULL_STOPS}]+)"
    rf"(?P<close>(?:[ \u00a0\u202f]?[»›]|[{re.escape(_CLOSING)}])*)"
    r"(?P<space>\s*)"
)

# A dotted abbreviation before the final period: U.S, e.g, i.e, z.B, Ph.D, a.m (not www.example or 3.5).
_DOTTED = re.compile(r"[^\W\d_]{1,3}(?:\.[^\W\d_]{1,3})+")

# Words that a period after does not end a sentence in, whatever follows (case as written). Titles and forms of
# address of the languages most translated (en, fr, de, es, it, pt, nl, the Nordic ones), and Latin.
ABBREVIATIONS = frozenset(
    """
    Mr Mrs Ms Messrs Mx Dr Drs Prof Profs Sr Sra Srta Sres Jr St Ste Sta Sto Mt Mme Mmes Mlle Mlles Mgr Me Hr Hrn Fr
    Frl Dott Dssa Sig Sigg Sig.ra Ing Avv Gen Col Lt Capt Cpt Sgt Cmdr Adm Maj Rev Gov Sen Rep Hon Pres Esq Dres
    Dña Dª Ud Uds Vd Vds Exmo Exma Ilmo Ilma Excmo Excma Mons Pfr Bros Inc Ltd Co Corp Cie dhr Dhr mevr Mevr Mw
    vs vgl usw bzw ca cf cfr etc ecc sog ggf evtl inkl zzgl approx Abb Bsp Str
    """.split()
)

# Words that a period after does not end a sentence in when a number follows: `No. 5`, `p. 12`, `Art. 3`.
# Months too: `Jan. 5`, but `I saw Jan. He left.`
NUMERIC_ABBREVIATIONS = frozenset(
    """
    No Nos Nr Nro Núm Art Arts Vol Vols Fig Figs Ch Chap Sec Ed Ex Nº pp Bd Hft Abs Kap Tab Tel Jan Feb Febr Mar Apr
    Jun Jul Aug Sep Sept Oct Okt Nov Dec Dez
    """.split()
)
_ROMAN = re.compile(r"[IVXLC]{2,}")  # Louis XIV., Heinrich VIII.
_DOUBLED = re.compile(r"([^\W\d_])\1")  # Spanish plurals of initials: EE. UU. (Estados Unidos), FF. AA.

# Characters written without a space between sentences (Han, kana, their full-width punctuation).
_NO_SPACE = re.compile(r"[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, in order, without the white space between them.

    Args:
        text: one line of text.

    Returns:
        Its sentences, each stripped of the white space around it; `[text]` as it is when there is no break in it.
    """
    last = len(text.rstrip())
    starts, quotes = [0], _Quotes(text)
    for match in _CANDIDATE.finditer(text, 0, last + 1):
        if match.end() >= last:
            break  # the end of the line
        if quotes.closed_at(match.end()) and _breaks(text, match):
            starts.append(match.end())
    if len(starts) == 1:
        return [text]
    return [text[a:b].strip() for a, b in zip(starts, starts[1:] + [len(text)], strict=True)]


def _breaks(text: str, match: re.Match[str]) -> bool:
    """Whether the candidate `match` of `_CANDIDATE`, outside quotes, ends a sentence (see the module's docstring).
    It reads a few characters on either side of the candidate only, so a long line is split in linear time."""
    stop, close, space, end = match["stop"], match["close"], match["space"], match.end()
    if stop[0] in _FULL_STOPS:
        return bool(space) or not close  # `「どこ？」と言った`: a closed quote and no space goes on
    if not space:
        return False
    start = _sentence_start(text[end : end + 32])
    if start is None:
        return False
    if stop not in (".", ".."):  # ! ? … and runs of them: `Attends ! Je viens.`, `Je pense... Non.`
        return True
    before = text[max(match.start() - 64, 0) : match.start()]
    word = before.rsplit(None, 1)[-1].lstrip(_OPENING) if before.strip() else ""
    if not word or close:  # `(voir plus haut.) Ensuite`, `« C'est fini. » Il part.`
        return True
    if len(word) == 1 and word.isalpha():  # initials: J. K. Rowling, M. Dupont
        return False
    if word in ABBREVIATIONS or _DOTTED.fullmatch(word) or _ROMAN.fullmatch(word) or _DOUBLED.fullmatch(word):
        return False
    if word in NUMERIC_ABBREVIATIONS and start.isdigit():
        return False
    if word.isdigit() and len(word) <= 2 and not start.isdigit():  # an ordinal: am 3. Oktober, 1. Einleitung
        return False
    return True


def _sentence_start(rest: str) -> str | None:
    """The first letter or digit of `rest` when it can begin a sentence (upper case, a digit, or a letter of a
    script without case), after any opening quotes, brackets, `¿ ¡` and the spaces French puts after `«`; else None."""
    for char in rest:
        if char in _OPENING or char in " \u00a0\u202f":
            continue
        if char.isdigit() or char.isupper() or char.istitle() or (char.isalpha() and not char.islower()):
            return char
        return None
    return None


class _Quotes:
    """Whether the quotes and brackets a line opens up to a point are all closed there: an even number of each kind
    of quote (whose direction differs between languages: German writes „so“ and »so«), no parenthesis open. Counted
    as the points move along the line, each part of it once."""

    KINDS = ('"', "«»", "“”„", "「」", "『』")

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0
        self.quotes = [0] * len(self.KINDS)
        self.brackets = 0  # ( and （ opened, less those closed

    def closed_at(self, end: int) -> bool:
        """Whether all are closed at `end` (at or after the point asked before)."""
        part, self.at = self.text[self.at : end], end
        for n, kind in enumerate(self.KINDS):
            self.quotes[n] += sum(part.count(mark) for mark in kind)
        self.brackets += part.count("(") + part.count("（") - part.count(")") - part.count("）")
        return self.brackets <= 0 and all(count % 2 == 0 for count in self.quotes)


def join_sentences(translations: list[str]) -> str:
    """The translations of a line's sentences as one line: separated by a space, except where the text on either
    side is Chinese or Japanese, written without one. Empty translations are left out."""
    line = ""
    for text in translations:
        if not text:
            continue
        if line and not (_NO_SPACE.match(line[-1]) or _NO_SPACE.match(text[0])):
            line += " "
        line += text
    return line
