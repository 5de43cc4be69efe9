"""What a model trained on plain sentence pairs is given for a line of text, and how its translations are written
back (`to_translate`, `Part.written`, `join_sentences`): a line that holds several sentences is translated one
sentence at a time; a sentence in capitals or in title case as an ordinary sentence is written (`sentence_case`);
one in a frame (a list's bullet, double quotes or brackets around it, emoji, markup, an address or a mention at
its edges) without it (`frame`); one without a letter, or of nothing but addresses, is written as it is; its
numbers as a placeholder, for a model trained so (`with_number_placeholders`, `Part.numbers`). `verbatim` gives the line as written. Plain Python, no torch: the ONNX export carries
this file.

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
- After `.`, no break where the word before is a single letter (initials: `J. K. Rowling`, `M. Dupont`, `J.-P.`;
  not a unit after a number, `100 m.`), a dotted
  abbreviation (`U.S.`, `e.g.`, `z.B.`, `Ph.D.`), a doubled initial (`EE. UU.`), a Roman numeral (`Louis XIV.`),
  a number before another (a date: `3. 10. 1990`) or of one or two digits (ordinals in German, the Nordic and
  Slavic languages: `am 3. Oktober`), or one of the common abbreviations below, in any case and after an elided
  article too (`Mr.`, `DR.`, `prof.`, `dell'Avv.`, `etc.`...; `No.`, `pp.`, `l'art.`, `Jan.`... only before a
  number).
- Full stops of scripts that need no space after them (`。！？`, Devanagari `।`, Arabic `؟`, Urdu `۔`, Ethiopic `።`,
  Armenian `։`) break without one, except right after a closing quote (`「どこ？」と言った`).
- Never inside quotes or brackets: a break is made only where the quotes before it are balanced (an even number of
  `"`, of guillemets, of curly double quotes, of corner brackets; single quotes told from apostrophes by their
  place) and no parenthesis is open, so `"Où es-tu ? Je t'attends." dit-il.` and `'Hello. How are you?' she
  asked.` stay whole. A quote opened and never closed keeps the rest of the line whole.
- A dash and a space open a sentence as a quote does: `— Où es-tu ? — Ici.` breaks before the second dash.

`join_sentences` puts the translations back on one line: a space between them, none where either side is Chinese
or Japanese text (`我很累。我要睡觉。`).

A sentence written in capitals (`JE SUIS TRÈS FATIGUÉ.`, a headline, a shouted line) is given to the model as an
ordinary sentence is written and its translation written in capitals (`in_capitals`, `sentence_case`): a model
trained on ordinary text has seen few words in capitals, which its tokenizer cuts into short pieces it cannot read;
the quickstart model translated 300 dev sentences in capitals at BLEU 0.29 against their references in capitals,
at 35.30 given them in lower case but for their first letter, and at 36.18 with each word in the case the tokenizer
knows best (`MARIE` as `Marie`; 37.27 as written).
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

# Ends of a sentence that white space must follow, and those of scripts that need none after them.
_STOPS = ".!?…‼⁇⁈⁉‽"
_FULL_STOPS = "。！？｡।॥؟۔።։"
_CLOSING = "\"'»«”“’‘›‹」』）〕】)]}"
_OPENING = "\"'«»“‘„‚‹›「『（〔【([{¿¡"
_DASHES = "—–-"  # a dash and a space open a line of dialogue: `— Où es-tu ? — Ici.`

# Markup (a line of HTML or XML): an element's start tag, its name the group; any tag, start, end or empty.
# Attributes, each after white space: a name, and `=` and a value, quoted (which may hold `>`: `title="a>b"`) or
# not. Written so that no run of text can be read two ways: a line of thousands of spaces after `<a` took 25 s.
_ATTRIBUTES = r"""(?:\s+[^\s<>"'=/]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s<>"']+))?)*"""
_START_TAG = re.compile(rf"<([A-Za-z][\w:.-]*){_ATTRIBUTES}>")
_TAG = rf"</?[A-Za-z][\w:.-]*{_ATTRIBUTES}\s*/?>"

# Emoji (`_emoji`'s ranges), and what joins and modifies them (a joiner, variation selectors, a keycap, skin tones).
_EMOJI_RUN = "[\u2600-\u2bff\U0001f000-\U0001faff][\u2600-\u2bff\U0001f000-\U0001faff\u200d\ufe0e\ufe0f\u20e3]*"

# Candidate breaks: terminators, closing quotes or brackets (French puts a space before its `»`), emoji after the
# end (`Je t'aime. 😀 Et toi ?`: the emoji stays with the sentence before it, whose frame it is), white space.
_CANDIDATE = re.compile(
    rf"(?P<stop>[{re.escape(_STOPS)}]+|[{_FULL_STOPS}]+)"
    rf"(?P<close>(?:[ \u00a0\u202f]?[»›]|[{re.escape(_CLOSING)}]|</[A-Za-z][\w:.-]*\s*>|[*_~]"  # (markup's too)
    rf"|[ \u00a0\u202f]?{_EMOJI_RUN})*)"
    r"(?P<space>\s*)"
)

# A dotted abbreviation before the final period: U.S, e.g, i.e, z.B, Ph.D, a.m (not www.example or 3.5).
_DOTTED = re.compile(r"[^\W\d_]{1,3}(?:\.[^\W\d_]{1,3})+")
# French hyphenated initials before a name: J.-P (Sartre), J.-Ph (Martin), J.-C (Killy); but J.-C after av., apr.
# or a number is Jésus-Christ, which ends `300 av. J.-C.` as a word does, and which follows its av. or apr. in one
# sentence (`79 apr. J.-C. par le Vésuve` goes on).
_HYPHENED_INITIALS = re.compile(r"[^\W\d_]\.-[^\W\d_]{1,2}")
_JESUS_CHRIST = "J.-C."
_ERA = ("av", "apr", "ap")  # avant / après Jésus-Christ

# Words that a period after does not end a sentence in, whatever follows, in any case (`Prof.`, `prof.`, `PROF.`):
# titles, forms of address and common abbreviations of the languages most translated (en, fr, de, es, it, pt, nl,
# the Nordic and Slavic languages, el, hi, vi) and Latin; none of them a word of its own in those languages.
ABBREVIATIONS = frozenset(
    """
    mr mrs ms messrs mx dr drs dra dras prof profs sr sra srta sres jr st ste mt mme mmes mlle mlles mgr hr hrn frl
    dott dssa sig sigg ing avv lt capt cpt sgt cmdr adm rev gov rep pres esq dres lic arq dña dª ud uds vd vds exmo
    exma ilmo ilma excmo excma pfr bros inc ltd corp cie dhr mevr mw dipl av avda ul np tzv např tj resp ул гр тов
    δρ डॉ श्री tp vs vgl usw bzw ca cf cfr etc ecc sog ggf evtl inkl zzgl approx abb bsp str
    coll réf éd bd boul
    """.split()
)
# As written only: in lower case they are words of some language (`Call me.`, Swedish `hon` and `maj`, Italian `sta`).
ABBREVIATIONS_AS_WRITTEN = frozenset("Me Co Fr Col Mons Sen Hon Gen Sta Maj".split())

# Words that a period after does not end a sentence in when a number follows, in any case: `No. 5`, `pp. 12`,
# `Art. 3`, `Hauptstr. 5`; months too (`Jan. 5`, but `I saw Jan. He left.`).
NUMERIC_ABBREVIATIONS = frozenset(
    """
    no nos nr nro núm art arts vol vols fig figs ch chap sec ed ex nº pp hft abs kap tab tel tél ref env jan feb febr mar
    apr jun jul aug sep sept oct okt nov dec dez
    """.split()
)
_ROMAN = re.compile(r"[IVXLC]{2,}")  # Louis XIV., Heinrich VIII.
_APOSTROPHE = re.compile("['’]")
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
    blocks = {m.end() for m in _BLOCK_END.finditer(text, 0, last)} if "</" in text else set()
    for match in _CANDIDATE.finditer(text, 0, last + 1):
        if match.end() >= last:
            break  # the end of the line
        if quotes.closed_at(match.end()) and _breaks(text, match):
            starts.append(match.end())
    if blocks:  # `<li>Je suis là</li><li>Il pleut</li>`: each block of a line of HTML apart, ended or not
        starts = sorted(set(starts) | blocks)
    if len(starts) == 1:
        return [text]
    return [text[a:b].strip() for a, b in zip(starts, starts[1:] + [len(text)], strict=True)]


# The end of an HTML block (a paragraph, a list's item, a heading, a table's cell...) before another tag: a break,
# whatever comes before it (a heading has no period).
_BLOCK_END = re.compile(
    r"</(?:p|div|li|dt|dd|h[1-6]|td|th|tr|caption|title|blockquote|section|article|header|footer|figcaption|pre|"
    r"option|label|button|summary)\s*>(?=\s*<[A-Za-z])",
    re.I,
)


def _breaks(text: str, match: re.Match[str]) -> bool:
    """Whether the candidate `match` of `_CANDIDATE`, outside quotes, ends a sentence (see the module's docstring).
    It reads a few characters on either side of the candidate only, so a long line is split in linear time."""
    stop, close, space, end = match["stop"], match["close"], match["space"], match.end()
    if stop[0] in _FULL_STOPS:
        return bool(space) or not close  # `「どこ？」と言った`: a closed quote and no space goes on
    if not space and not (close.endswith(">") and text[end : end + 1] == "<"):  # `Il pleut.</li><li>Je pars.`
        return False
    start = _sentence_start(text[end : end + 512])  # (a start tag may be long: `<a href="https://...">`)
    if start is None:
        return False
    if stop not in (".", ".."):  # ! ? … and runs of them: `Attends ! Je viens.`, `Je pense... Non.`
        return True
    before = text[max(match.start() - 64, 0) : match.start()]
    words = before.split()
    if text.startswith(_JESUS_CHRIST, end) and words and words[-1].lower() in _ERA:  # `79 apr. J.-C. par`
        return False
    token = before.rsplit(None, 1)[-1].lstrip(_OPENING) if before.strip() else ""
    token = _LEADING_MARKUP.sub("", token)  # `<abbr>Dr.</abbr> Martin`, `**Dr.** Martin`: the word is Dr
    if not token or _MARKUP.sub("", close).strip():  # `(voir plus haut.) Ensuite`, `« C'est fini. » Il part.`
        return True  # (a quote or bracket closed; markup alone, `Dr.</abbr>`, is no such end)
    # the token, and its last word after an elided article or a hyphen: dell'Avv. Rossi, l'art. 5, Dipl.-Ing. Weber
    elided, hyphened = _APOSTROPHE.split(token)[-1], token.rsplit("-", 1)[-1]  # (not the s of Tom's, the t of can't)
    for word in {token} | {part for part in (elided, hyphened) if len(part) > 1}:
        if len(word) == 1 and word.isalpha() and not (word in _UNIT_LETTERS and _number_before(before)):
            return False  # initials: J. K. Rowling, M. Dupont (not a unit after a number: `Il a couru 100 m. Il a gagné.`)
        if word.lower() in ABBREVIATIONS or word in ABBREVIATIONS_AS_WRITTEN:
            return False
        if _DOTTED.fullmatch(word) or _ROMAN.fullmatch(word) or _DOUBLED.fullmatch(word) or (
            _HYPHENED_INITIALS.fullmatch(word)
            and not (word + "." == _JESUS_CHRIST and len(words) >= 2 and (words[-2].lower().rstrip(".") in _ERA or words[-2].isdigit()))
        ):
            return False
        if start.isdigit() and (word.lower() in NUMERIC_ABBREVIATIONS or word.lower().endswith("str")):
            return False
    if token.isdigit() and (start.isdigit() or len(token) <= 2) and not _digit_run_end(before, start):
        # a date (3. 10. 1990, 2024. 1. 5.); an ordinal (am 3. Oktober, 1. Einleitung), which costs `I am 25. She
        # is 30.` its break
        return False
    return True


# Units of one letter, after a number a sentence may end with (metres, grams, hours, litres, seconds, tonnes):
# `500 g. C'est léger.`
# Not the other letters after a number, abbreviations a sentence goes on after: `44 v. Chr.`, `44 a. C.`, `7 p. 100`,
# `12 r. Lepic`, `1990 г.`, `2014 р.`, `1989 r.`, `Abs. 1 u. 2`.
_UNIT_LETTERS = frozenset("mghlst")  # (and seconds, tonnes: `en 9,58 s. C'est un record.`)


def _number_before(before: str) -> bool:
    """Whether the word before the last word of `before` is a number (`100 m`, `18 h`, `2,5 g`)."""
    words = before.split()
    return len(words) >= 2 and words[-2][:1].isdigit() and words[-2][-1:].isdigit()


def _digit_run_end(before: str, start: str) -> bool:
    """Whether the number that `before` ends with, before a period and a sentence starting with `start`, is the
    last group of a telephone number (`06 12 34 56 78. Appelle-moi`), not an ordinal: the word before it is digits."""
    words = before.split()
    return len(words) >= 2 and words[-2].isdigit() and not start.isdigit()


_MARKUP = re.compile(rf"{_TAG}|[*_~]")
_LEADING_MARKUP = re.compile(rf"^(?:{_TAG}|[*_~])+")


def _sentence_start(rest: str) -> str | None:
    """The first letter or digit of `rest` when it can begin a sentence (upper case, a digit, or a letter of a
    script without case), after any opening quotes, brackets, `¿ ¡`, the spaces French puts after `«` and markup (a
    start tag, Markdown's `*`, `_`, `~`); else None."""
    i = 0
    while i < len(rest):
        char = rest[i]
        if char in _OPENING or char in " \u00a0\u202f*_~" or (char in _DASHES and rest[i + 1 : i + 2].isspace()):
            i += 1
            continue
        if char == "<" and (tag := _START_TAG.match(rest, i)):  # markup: `Il pleut.</b> <b>Je pars.</b>`
            i = tag.end()
            continue
        if char.isdigit() or char.isupper() or char.istitle() or (char.isalpha() and not char.islower()):
            return char
        return None
    return None


# The marks `_Quotes` follows: quotes (each kind counted apart), single quotes, brackets.
_MARKS = re.compile("[\"«»“”„「」『』'‘’()（）]")
_PAIRED = ("«»", "“”„", "「」", "『』")


class _Quotes:
    """Whether the quotes and brackets a line opens up to a point are all closed there, followed mark by mark as
    the points move along the line (each part of it read once):

    - `"` and each pair of quotes (`«»`, `“”„`, `「」`, `『』`) by the parity of their count, as their direction
      differs between languages (German writes „so“ and »so«); a `"` after a digit is inches (`55"`), no quote;
    - single quotes by their place: `'` or `‘` opening before a letter where no letter comes before it, `'` or `’`
      closing after anything but a space where no letter follows it; between letters an apostrophe (`aujourd'hui`,
      `don't`), after a plural's s (`the boys' toys`) a closing one with nothing open;
    - brackets by depth, never below none: the `)` of a `:)` closes nothing."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0
        self.double = 0  # `"`
        self.paired = [0] * len(_PAIRED)
        self.single = 0  # single quotes open
        self.brackets = 0  # brackets open

    def closed_at(self, end: int) -> bool:
        """Whether all are closed at `end` (at or after the point asked before)."""
        text = self.text
        for found in _MARKS.finditer(text, self.at, end):
            mark, i = found.group(), found.start()
            before = text[i - 1] if i else " "
            after = text[i + 1] if i + 1 < len(text) else " "
            if mark in "()（）":
                self.brackets = max(self.brackets + (1 if mark in "(（" else -1), 0)
            elif mark in "'‘’":
                if before.isalnum() and after.isalnum():
                    continue  # an apostrophe
                if mark != "’" and not before.isalnum() and after.isalpha():
                    self.single += 1
                elif mark != "‘" and not before.isspace() and not after.isalnum():
                    self.single = max(self.single - 1, 0)
            elif mark == '"':
                self.double += not before.isdigit()
            else:
                self.paired[next(n for n, kind in enumerate(_PAIRED) if mark in kind)] += 1
        self.at = max(self.at, end)
        return not self.brackets and not self.single and self.double % 2 == 0 and all(n % 2 == 0 for n in self.paired)


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


def in_capitals(text: str) -> bool:
    """Whether `text` is written in capitals: at least two cased letters, none of them lower case (ß, which has no
    capital of common use, counts as none: `GROß`). Words that a digit begins (`10h30`, `5km`), addresses and mentions
    (`https://exemple.fr`, `@marie`) are not read: their case is their own (`RENDEZ-VOUS À 10h30 DEVANT LA GARE.`
    was given to the model half in capitals, and came out "Foooooo is 10:30."). A name with a digit after its
    letters is (`J'AI UN iPhone15` is no line in capitals)."""
    words = text.split()
    cased = 0
    for char in "".join(w for w in words if not _own_case(w)) if len(words) > 1 else text:
        if char.islower() and char != "ß":
            return False
        cased += char.isupper() or char.istitle()
    return cased >= 2


def _own_case(word: str, digits: bool = True) -> bool:
    """Whether the case of `word` (a word of a sentence, with the punctuation around it) is its own, whatever the
    case the sentence is written in: it is an address or a mention, or (with `digits`) a digit begins it."""
    first = word.lstrip(_OPENING)[:1]
    return (digits and first.isdigit()) or first in ("@", "#") or bool(_ADDRESS.search(word))


def _shouted_words_cased(text: str, cost: Callable[[str], Any] | None) -> str:
    """`text`, an ordinary sentence, with each word it writes in capitals for emphasis (`J'ai BESOIN d'une lampe.`)
    in the case the tokenizer knows it best, where that is a word of its vocabulary (one piece) and the
    capitals are not (more pieces): an acronym it knows in capitals (`USA`), or knows in no case (`SNCF`), stays.
    Without `cost`, `text` as it is. Only words of four letters or more (`ET`, `LA`, `US`, `GO` are acronyms more
    often than shouting), not a Roman numeral (`Charles VI`), not touching a digit, `/`, `.`, `_` or `@` (`CE1`,
    `/ABOUT`, `TRUE.md`); the first word of the sentence capitalised (`MAINTENANT je pars.` -> `Maintenant`).
    (A word in capitals cost the quickstart model its sentence: 300 dev sentences with their longest word so written
    scored 22.44, case-insensitive, and 46.54 given them so.)"""
    if cost is None or sum(map(str.__ne__, text, text.lower())) < 4:  # fewer capitals than one such word has
        return text
    first = _WORD.search(text)

    def cased(found: re.Match[str]) -> str:
        word, at, end = found.group(), found.start(), found.end()
        if len(word) < 4 or not in_capitals(word) or _ROMAN.fullmatch(word):
            return word
        if any(c.isdigit() or c in "/_@" for c in text[max(at - 1, 0) : at] + text[end : end + 1]) or re.match(
            r"\.\w", text[end : end + 2]
        ) or re.search(r"\w\.$", text[max(at - 2, 0) : at]):
            return word  # part of a code, a path, an address, a file name (`CE1`, `/ABOUT`, `LICENSE.md`)
        lower, capital = word.lower(), word[:1] + word[1:].lower()
        best = capital if found.start() == first.start() else min((lower, capital), key=cost)
        pieces, written = cost(best)[0], cost(word)[0]
        return best if pieces == 1 and pieces < written else word

    return _WORD.sub(cased, text)


def _lower_case_cased(text: str, cost: Callable[[str], Any]) -> str:
    """`text`, a line all in lower case, as an ordinary sentence is written: its first word capitalised, each other
    capitalised only where the vocabulary holds it in fewer pieces so (a name: `paris` -> `Paris`; not `je` -> `Je`,
    which a lower id only would make it). Where the line holds code, a path or an address (`/ = ( ) { } [ ] \\ @ #`,
    a dot inside a word), as it is."""
    if _CODE_LIKE.search(text):
        return text
    out, at, first = [], 0, True
    for found in _WORD.finditer(text):
        word = found.group()
        capital = word[:1].upper() + word[1:]
        if first:
            chosen = capital if cost(capital)[0] <= cost(word)[0] else word
        else:
            chosen = capital if cost(capital)[0] < cost(word)[0] else word
        out += [text[at : found.start()], chosen]
        at, first = found.end(), False
    return "".join(out) + text[at:]


_CODE_LIKE = re.compile(r"[/=(){}\[\]\\@#<>*_`|$%]|\w\.\w")


def in_lower_case(text: str) -> bool:
    """Whether `text` is written all in lower case: at least two cased letters, none upper case or title case."""
    cased = 0
    for char in text:
        if char.isupper() or char.istitle():
            return False
        cased += char.islower()
    return cased >= 2


def in_title_case(text: str) -> bool:
    """Whether `text` is written in title case, as a headline: three words or more, each word's first letter a
    capital, some letter in lower case (`Le Chat Est Sur La Table`)."""
    firsts = [next(c for c in word if c.isalpha()) for word in text.split() if any(c.isalpha() for c in word)]
    return len(firsts) >= 3 and all(c.isupper() or c.istitle() for c in firsts) and any(c.islower() for c in text)


def title_case(text: str) -> str:
    """`text` with the first letter of each word a capital (`it's` -> `It's`, not `It'S`)."""
    return _WORD_START.sub(lambda found: found.group(1) + found.group(2).upper(), text)


_WORD_START = re.compile(r"(^|\s[\"'«“„(\[¿¡]*)([^\W\d_])")

# A word: letters, with apostrophes or hyphens inside (`AUJOURD'HUI`, `DIT-IL`).
_WORD = re.compile(r"[^\W\d_]+(?:['’\-][^\W\d_]+)*")


def sentence_case(text: str, cost: Callable[[str], Any] | None = None) -> str:
    """`text`, written in capitals, as an ordinary sentence is written: its first word capitalised, the others in
    lower case, or, with `cost`, each word in whichever of its lower case, capitalised or capital forms `cost`
    ranks lowest: the tokenizer's (`Tokenizer.word_cost`: fewest pieces, then the most frequent), so that a name
    keeps its capital (`MARIE` -> `Marie`, not `marie`) and an acronym its capitals (`USA`) where the model knows
    them so. `JE SUIS LÀ.` -> `Je suis là.` Addresses and mentions stay as written (`_own_case`; a word touching a
    digit is cased as the others: `10H30` as `10h30`)."""
    kept = [m.span() for m in re.finditer(r"\S+", text) if _own_case(m.group(), digits=False)]  # in order
    starts = [a for a, _ in kept]
    out, at, first = [], 0, True
    for found in _WORD.finditer(text):
        word = found.group()
        inside = bisect.bisect_right(starts, found.start()) - 1  # the last kept span that starts at or before it
        if inside >= 0 and found.start() < kept[inside][1]:
            continue  # (written with the text around it)
        lower = unicodedata.normalize("NFC", word.lower())
        capital = unicodedata.normalize("NFC", lower[:1].upper() + lower[1:])
        forms = [capital, word] if first else [lower, capital, word]
        if cost is not None:
            forms.sort(key=cost)  # (stable: the plain form first among equals)
        out += [text[at : found.start()], forms[0]]
        at, first = found.end(), False
    return "".join(out) + text[at:]


# Numbers in digits, for a model that reads them as a placeholder (`ModelConfig.numbers`): a corpus of everyday
# sentences holds few (half a percent of the Tatoeba pairs), so a model that reads their pieces mistranslates nearly
# all of them (the quickstart model got the numbers of none of 339 sentences right: `J'ai 3 chats.` -> `I have
# cats.`). Each number a training pair has on both sides is given there as one placeholder, XNUM, on both sides
# (`with_number_placeholders`), which the model learns to copy: at translation each number of a sentence is given
# so (`Part.numbers`), and the translation written with the sentence's numbers in its placeholders, in the order
# they came (`Part.written`): the numbers of the Tatoeba pairs that have several on both sides come in the same
# order on both (49 of 49). One placeholder for all, not one for each (XNUMA, XNUMB, ...): with one each, the
# corpus's few sentences of three numbers or more left the third one on barely trained. A number here is a run of
# ASCII digits, with `.` or `,` between groups of them (`3`, `10.000`, `3,14`) or spaces between groups of three
# (`10 000`, with a no-break space too), touching a letter or not (`80kg` is given as `XNUMkg`, `2h30` as
# `XNUMhXNUM`: given as written, the quickstart model made `Il pèse 80kg.` "He is in Han.").
NUMBER_PLACEHOLDER = "XNUM"
_NUMBER = re.compile(
    r"(?<![0-9])(?<![0-9][.,])(?:[0-9]{1,3}(?:[ \u00a0\u202f][0-9]{3})+(?![0-9])|[0-9]+)(?:[.,][0-9]+)*(?![0-9]|[.,][0-9])"
)
# (with the space before it, or the mark that joins it to a number before it: one of no number is written without
# them, `Il fait -5 degrés.` -> "He did XNUM:XNUM." -> "He did 5.", not "5:.")
_PLACEHOLDER_OUT = re.compile(r"(?<=XNUM)[:.,/-](?=XNUM)|( ?)XNUM")
# A web or e-mail address inside a sentence is given as the placeholder too, and written back as it was: no model
# translates one, and the quickstart model (trained with numbers only as the placeholder) garbled or dropped 6 of 8
# such addresses given as written (`Contactez-nous à info@exemple.fr ou sur https://exemple.fr/contact pour plus
# d'informations.` -> "Go away, we grow down or less."), and kept 6 of 8 given as the placeholder ("Let's go to
# info@exemple.fr or https://exemple.fr/contact."). Its digits are no numbers of the sentence
# (`https://example.com/page/123` gave its 123 to the placeholder of `pour 5 chats`). An address at a sentence's
# edge is taken off it before (`frame`); the punctuation a sentence puts after an address is not part of it.
# Each part is tried only where it can start, so that a line of a megabyte with no space is read in linear time (tried
# at every letter of a long run, `[A-Za-z][A-Za-z0-9+.-]*://` and `[\w.+-]+@` read to the run's end from each: 40,000
# letters took 10 s, a megabyte some hours): a scheme of at most 32 characters, not right after a letter; an e-mail's
# name from the start of its run (or after mailto:).
_ADDRESS = re.compile(
    r"(?:(?<![A-Za-z])[A-Za-z][A-Za-z0-9+.-]{0,31}://|www\.)\S+"
    r"|(?:mailto:[\w.+-]+|(?<![\w.+-])[\w.+-]+)@[\w-]+(?:\.[\w-]+)+"
)
_ADDRESS_TRAILING = ".,;:!?…\"'»”’>"  # a sentence's punctuation after an address: `(voir www.a.org).`, `<https://a.org>`
_PAIRS = {")": "(", "]": "[", "}": "{"}


def _address_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each web or e-mail address of `text`, without the punctuation after it (a closing bracket
    only where the address does not open it: `https://fr.wikipedia.org/wiki/Paris_(France)` keeps it)."""
    spans = []
    for m in _ADDRESS.finditer(text):
        start, end = m.span()
        while end > start:
            last = text[end - 1]
            opening = _PAIRS.get(last)
            if last in _ADDRESS_TRAILING or (opening and text.count(last, start, end) > text.count(opening, start, end)):
                end -= 1
            else:
                break
        if end > start:
            spans.append((start, end))
    return spans


# A run of three or more groups of digits with spaces, dots, hyphens or slashes between them and seven digits or
# more: a telephone number (`06 12 34 56 78`, `+33 6 12 34 56 78`, `555-123-4567`) or a date written with numbers
# (`14-07-2023`, `12/05/2024`: as three numbers the quickstart model made it "12:05", its year lost), given as one placeholder and written back as it was. Given as its numbers, five placeholders,
# the quickstart model kept two: `Appelle-moi au 06 12 34 56 78.` -> "Call me at 06:12.".
# `(555) 123-4567` and `+33 (0)6 12 34 56 78` are runs too. A run never stops before a group it could take: `3 000
# 000 000,75` is one number (`_NUMBER`), not a run `3 000 000` and the digits `000,75` left as written.
_DIGIT_RUN = re.compile(
    r"(?<![\w+.,(/-])(?:\+?[0-9]{1,4}|\([0-9]{1,4}\))(?:[ \u00a0./-]?\([0-9]{1,4}\)|(?:[ \u00a0./-]|(?<=\)))[0-9]{1,4}){2,}"
    r"(?![0-9]|[ \u00a0.,/-]\(?[0-9])"
)
RUN_DIGITS = 7


def _copied(text: str, runs_too: bool = True) -> list[tuple[int, int]]:
    """(start, end) of what a model that reads numbers as a placeholder is given as one, in order: the numbers of
    `text` (`_NUMBER`), its telephone numbers and numeric dates (`_DIGIT_RUN`) and its web and e-mail addresses
    (whose digits are theirs, not numbers). Without `runs_too`, a run's numbers one by one."""
    addresses = _address_spans(text)
    runs = [m.span() for m in _DIGIT_RUN.finditer(text) if sum(c.isdigit() for c in m.group()) >= RUN_DIGITS] if runs_too else []
    numbers = [m.span() for m in _NUMBER.finditer(text) if not _ends_a_word(text, m.start())]
    taken = sorted(addresses)  # disjoint, in order
    # of a run and a number that overlap, the one that starts first, then the longer, as a regular expression's
    # leftmost-longest match (`1 000 000 2 000`: one run; `3 000 000 000,75`: one number)
    for a, b in sorted(runs + numbers, key=lambda span: (span[0], -span[1])):
        # of the spans taken (disjoint), only the last that starts before b can reach past a: the others end before it
        before = bisect.bisect_left(taken, (b,))
        if not (before and taken[before - 1][1] > a):
            taken.insert(before, (a, b))
    return taken


def _ends_a_word(text: str, start: int) -> bool:
    """Whether the digits at `start` are a name's or an identifier's: in a word that a mention's `@` or a hashtag's
    `#` begins, or that holds a `_` (`@tom2000`, `#JO2024`, `@marie_42`, `notes_2023.txt`). Not numbers of the
    sentence, as an address's digits are not (`Écris à @tom2000 pour réserver 3 places.` gave its 2000 to the
    placeholder of `3 places`). Digits glued to a word otherwise stay numbers (`EUR50`, `AF447`, `iPhone15`,
    `10h30`, `5km`, `我有3个`): a name's digits can be a number to keep (`Windows10`), and are said as left out."""
    def word_char(c: str) -> bool:
        return c == "_" or c.isdigit() or c.isupper() or c.islower()

    i, stop = start, max(start - 64, 0)  # (a run longer than that is no word: read in linear time)
    while i > stop and word_char(text[i - 1]):
        i -= 1
    if i > 0 and text[i - 1] == "@":
        return True
    end = min(start + 64, len(text))
    j = start
    while j < end and word_char(text[j]):
        j += 1
    word = text[i:j]  # a hashtag has a letter (`#JO2024`); `#12345` is a number (an order's, a ticket's, a rank)
    return "_" in word or (i > 0 and text[i - 1] == "#" and any(c.isalpha() for c in word))


def is_address(value: str) -> bool:
    """Whether `value`, one of a sentence's `Part.numbers`, is a web or e-mail address (not a number)."""
    return bool(_ADDRESS.fullmatch(value))


def left_out_words(values: Sequence[str]) -> tuple[str, str]:
    """What `values` left out of a translation are called, one and several: ("number", "numbers"), or, where one
    of them is an address, ("number or address", "numbers and addresses")."""
    if any(is_address(v) for v in values):
        return "number or address", "numbers and addresses"
    return "number", "numbers"


def count_numbers(text: str) -> int:
    """How many numbers (and web or e-mail addresses) `text` has, as a model that reads them as a placeholder is
    given them."""
    return len(_copied(text))


def _as_placeholder(text: str, found: list[tuple[int, int]]) -> str:
    """`text` with each of the spans `found` in it (in order) as the placeholder."""
    pieces, end = [], 0
    for start, stop in found:
        pieces += [text[end:start], NUMBER_PLACEHOLDER]
        end = stop
    return "".join(pieces) + text[end:]


def with_number_placeholders(source: str, target: str) -> tuple[str, str]:
    """A training pair with each number (and web or e-mail address) it has on both sides as the placeholder, on
    both (every time it comes); a number on one side only (`treize` -> `13`) stays as it is; a pair that holds the
    text of the placeholder is left whole."""
    if NUMBER_PLACEHOLDER in source or NUMBER_PLACEHOLDER in target:
        return source, target
    found = {source[a:b] for a, b in _copied(source)}, {target[a:b] for a, b in _copied(target)}
    # a telephone number or date written otherwise on the other side (`06 12 34 56 78` and `06-12-34-56-78`): the
    # pair's numbers one by one, as they were before runs were one placeholder
    runs_too = all(v in found[1 - side] for side in (0, 1) for v in found[side] if _is_run(v))
    if not runs_too:
        found = {source[a:b] for a, b in _copied(source, False)}, {target[a:b] for a, b in _copied(target, False)}
    on_both = found[0] & found[1]
    if not on_both:
        return source, target
    return numbers_as_placeholder(source, on_both, runs_too), numbers_as_placeholder(target, on_both, runs_too)


def _is_run(value: str) -> bool:
    """Whether a copied span is a run of digit groups (`_DIGIT_RUN`), not a number or an address."""
    return not _NUMBER.fullmatch(value) and not is_address(value)


def numbers_as_placeholder(text: str, numbers: tuple[str, ...] | list[str] | set[str], runs_too: bool = True) -> str:
    """`text` with each of `numbers` (numbers, runs of them and addresses: `_copied`) in it as the placeholder (a
    target as training gives it beside a source of those numbers)."""
    chosen = set(numbers)
    return _as_placeholder(text, [(a, b) for a, b in _copied(text, runs_too) if text[a:b] in chosen])


def placeholder_values(text: str, numbers: tuple[str, ...] | list[str] | set[str]) -> tuple[str, ...]:
    """The values `numbers_as_placeholder(text, numbers)` makes placeholders of, in the order they come in `text`:
    what each placeholder of a teacher-forced target stands for."""
    chosen = set(numbers)
    return tuple(text[a:b] for a, b in _copied(text) if text[a:b] in chosen)


def _with_numbers(part: Part) -> Part:
    """`part` given with its numbers as the placeholder (`Part.numbers`); as it is where it holds the text of the
    placeholder (its translation then written as the model wrote it, the text kept)."""
    if NUMBER_PLACEHOLDER in part.given:
        return part
    found = _copied(part.given)
    return part._replace(given=_as_placeholder(part.given, found), numbers=_as_written(part.text, [part.given[a:b] for a, b in found]))


def _as_written(text: str, values: list[str]) -> tuple[str, ...]:
    """`values` found in a sentence given in sentence case (a line in title case or capitals) as `text` writes
    them, looked for in order, letter case aside: `Https://Bit.Ly/AbCdEf` was written back lowercased, a broken
    link; as they are where not found."""
    out, at = [], 0
    for value in values:
        m = re.compile(re.escape(value), re.IGNORECASE).search(text, at)
        if m is None or len(m.group()) != len(value):
            out.append(value)
        else:
            out.append(m.group())
            at = m.end()
    return tuple(out)


def _numbers_written(translation: str, numbers: tuple[str, ...]) -> str:
    """`translation` with its placeholders replaced by `numbers`, in order; one past them (a number the model made
    up) left out, with the space before it or the mark that joined it to the one before (`XNUM:XNUM`)."""
    if NUMBER_PLACEHOLDER not in translation:
        return translation
    seen = 0  # placeholders met so far

    def number(found: re.Match[str]) -> str:
        nonlocal seen
        if found.group(1) is None:  # a mark between two placeholders: kept where the second has a number
            return found.group() if seen < len(numbers) else ""
        seen += 1
        return found.group(1) + numbers[seen - 1] if seen <= len(numbers) else ""

    return _PLACEHOLDER_OUT.sub(number, translation).strip()


def numbers_left_out(translation: str, numbers: tuple[str, ...]) -> tuple[str, ...]:
    """The numbers `_numbers_written` finds no placeholder of `translation` for: the last ones, where the model
    wrote fewer placeholders than the sentence has numbers (which of them the model left out is not known: they are
    written in order)."""
    return tuple(numbers[translation.count(NUMBER_PLACEHOLDER) :])


class Part(NamedTuple):
    """A sentence of a line (or the line whole) as written, what the model is given for it, and how its
    translation is written (`written`): in capitals or in title case where the sentence is (`capitals`, `title`),
    inside the frame the sentence was in (`prefix`, `suffix`: a list's bullet or number, the quotes or brackets
    around it, emoji); as written, without the model, where it holds no letter to translate (`given` is ""); as the
    model wrote it with `verbatim`."""

    text: str
    given: str
    capitals: bool = False
    prefix: str = ""
    suffix: str = ""
    title: bool = False  # written in title case: so is its translation
    verbatim: bool = False  # the model's translation as it is
    # for a model that reads numbers as a placeholder, the numbers `given` has as XNUM, in order (none: ()), written
    # into its translation's placeholders in that order; None for one that reads them as written
    numbers: tuple[str, ...] | None = None

    @property
    def literal(self) -> bool:
        """Nothing to translate: the part is written as it is (a number, a date, punctuation, emoji)."""
        return not self.given and any(not c.isspace() and unicodedata.category(c) not in ("Cf", "Cc") for c in self.text)

    def written(self, translation: str) -> str:
        """The translation of `given` as this sentence is written."""
        if self.literal:  # without the invisible characters the model is not given either (`\u200b42\u200b`)
            return self.text.translate(_INVISIBLE).strip()
        if self.verbatim:
            return translation
        if (self.prefix or self.suffix) and translation.endswith(".") and not _abbreviation_at_end(translation):
            # a fragment in a frame (`(rires)`, a list's item, a label before an address) as the model, trained on
            # sentences, made it one: `(Laughter.)`; written without its period, or with the colon it had
            # (`Contact : tom@example.com` -> `Contact: tom@example.com`, not `Contact. tom@...`)
            last = self.given.rstrip()[-1:]
            if _unended(self.given):
                translation = translation[:-1]
            elif last in ":;" and not translation.endswith(".."):
                translation = translation[:-1] + last
        if self.capitals:  # (a mention as written: `@marie`, not `@MARIE`)
            translation = translation.upper()
            for mention in sorted({m for m in _MENTION.findall(self.text) if m.upper() != m}, key=len, reverse=True):
                translation = re.sub(rf"(?<![\w@.+-]){re.escape(mention.upper())}(?![\w-])", lambda _, m=mention: m, translation)
        elif self.title:
            translation = title_case(translation)
        if self.numbers is not None:  # after the case: an address's letters are its own (`https://bit.ly/AbC`)
            translation = _numbers_written(translation, self.numbers)
        return self.written_prefix + translation + self.written_suffix

    def left_out(self, translation: str) -> tuple[str, ...]:
        """The numbers of this sentence that the model's `translation` has no placeholder for (`numbers_left_out`);
        none for a model that reads numbers as written, nor for a sentence written as it is or given verbatim."""
        if not self.numbers or self.literal or self.verbatim:
            return ()
        return numbers_left_out(translation, self.numbers)

    @property
    def written_prefix(self) -> str:
        """The prefix as it is written around a translation: guillemets and low-9 quotes as `"` (`_ENCLOSING`), but
        inside a tag (`<span title="« note »">`)."""
        return _outside_tags(_QUOTES_OUT[0], self.prefix) if any(c in self.prefix for c in "«„") else self.prefix

    @property
    def written_suffix(self) -> str:
        return _outside_tags(_QUOTES_OUT[1], self.suffix) if any(c in self.suffix for c in "»“") else self.suffix


_ENDS = ".!?…。！？;:"  # a sentence's (or a clause's) end
_MENTION = re.compile(r"(?<![\w.+-])[@#][^\W_][\w-]*")  # a mention or a hashtag (not an e-mail's @domain)
# `corpus.INVISIBLE` (this file does not import it: the ONNX export carries it alone): characters that only shape how
# text is shown, which the tokenizer drops; the zero-width joiner and non-joiner, parts of emoji and letters, stay.
INVISIBLE = "\ufeff\u200b\u2060\u00ad\u200e\u200f"
_INVISIBLE = str.maketrans("", "", INVISIBLE)


def _unended(text: str) -> bool:
    """Whether `text` plainly ends without a sentence's end: its last character, before any closing quotes or
    brackets, is a letter of a script with case or a digit (`Le chat noir`, `Chapitre 3`, `Tom a dit « oui »`).
    Not where it is punctuation of any kind (`.`, `।`, `።`, `…`), nor a letter of a script that writes no mark at a
    sentence's end (Thai) or whose headlines are unknown here (CJK): there the model's period stays."""
    last = text.rstrip().rstrip(_CLOSING + " \u00a0\u202f")[-1:]
    return bool(last) and ((last.isdigit() and last.isascii()) or last.isupper() or last.islower())


def _abbreviation_at_end(translation: str) -> bool:
    """Whether the final period of `translation` belongs to an abbreviation (`8 a.m.`, `the U.S.`, `etc.`, `Mr.`)
    or to an ellipsis (`...`)."""
    words = translation[:-1].split()
    word = words[-1].lstrip(_OPENING) if words else ""
    return translation.endswith("..") or bool(word) and (
        bool(_DOTTED.fullmatch(word)) or word.lower() in ABBREVIATIONS or word in ABBREVIATIONS_AS_WRITTEN
    )


# A terminal's escape sequences (colours and bold, `\x1b[1m`; a window's title, `\x1b]0;...\x07`) and control
# characters (a bell, a backspace, DEL, C1 controls) are no text to translate, but reached the model as byte tokens:
# `\x1b[1m` alone was translated as "Get up." (its digit counted as a number left out), `Bonjour\x07 Tom.` as "Tom has
# gone.". They are taken out of what the model is given (not with verbatim); a tab and the line ends stay.
_CONTROLS = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def without_controls(line: str) -> str:
    """`line` as the model is given it, without a terminal's escape sequences and control characters (`_CONTROLS`)."""
    return _CONTROLS.sub(_control_out, line)


def _control_out(found: re.Match[str]) -> str:
    """What a control character or escape sequence of `_CONTROLS` leaves: a space where it is one (a vertical tab, a
    form feed, NEL, the separators U+001C-U+001F: `Bonjour\x85Tom.` was given as `BonjourTom.`), else nothing."""
    return " " if found.group().isspace() else ""


def to_translate(
    line: str, split: bool, cost: Callable[[str], Any] | None = None, verbatim: bool = False, numbers: bool = False
) -> list[Part]:
    """What the model is given for `line`: its sentences (`split_sentences`; the line whole without `split`), each
    without its frame (`frame`), in sentence case where it is written in capitals (`sentence_case`, with `cost`),
    with its numbers as the placeholder for a model that reads them so (`numbers`: `Part.numbers`), none for a
    sentence without a letter (written as it is). With `verbatim`, or a line with none of these,
    `[Part(line, line)]`."""
    if verbatim:
        return [Part(line, line, verbatim=True)]
    line = without_controls(line)
    if not line.strip():
        return [Part(line, line)]  # a blank line: an empty one
    parts: list[Part] = []
    _parts(line, split, cost, parts, 0)
    if numbers:
        parts = [part if part.literal else _with_numbers(part) for part in parts]
    return parts


MAX_DEPTH = 8  # frames and sentences inside frames: past this, the rest is given to the model as it is


def _parts(
    text: str, split: bool, cost: Callable[[str], Any] | None, parts: list[Part], depth: int, one: bool = False
) -> None:
    """Append the parts of `text` to `parts`: its frames taken off, one after the other (`- "..."`), their prefix
    given to the first part inside them and their suffix to the last (quotes around two sentences: `"Où es-tu ? Je
    t'attends."`), and the sentences inside split. `one`: `text` is a sentence a split gave, split again only where
    a frame came off it."""
    prefix, inner, suffix = "", text, ""
    while depth < MAX_DEPTH:
        before, within, after = frame(inner)
        if not (before or after):
            break
        prefix, inner, suffix, depth = prefix + before, within, after + suffix, depth + 1
    first = len(parts)
    again = not one or bool(prefix or suffix)
    sentences = split_sentences(inner) if split and again and depth < MAX_DEPTH else [inner]
    if len(sentences) > 1:
        for sentence in sentences:
            _parts(sentence, split, cost, parts, depth + 1, one=True)
    elif not any(c.isalpha() for c in inner) or untranslatable(inner):  # a number; a web address alone
        parts.append(Part(inner, ""))
    elif in_capitals(inner):
        parts.append(Part(inner, _as_apostrophes(sentence_case(inner, cost)), capitals=True))
    elif in_title_case(inner):
        parts.append(Part(inner, _as_apostrophes(sentence_case(inner, cost)), title=True))
    elif cost is not None and in_lower_case(inner):
        # a chat message, a line typed all in lower case (`tom est à paris`): given as an ordinary sentence is
        # written (`Tom est à Paris`; a vocabulary of lowercased text keeps it as it is), and its translation
        # written as the model writes it
        parts.append(Part(inner, _as_apostrophes(_lower_case_cased(inner, cost))))
    else:
        parts.append(Part(inner, _as_apostrophes(_shouted_words_cased(inner, cost))))
    if prefix or suffix:
        parts[first] = parts[first]._replace(text=prefix + parts[first].text, prefix=prefix + parts[first].prefix)
        parts[-1] = parts[-1]._replace(text=parts[-1].text + suffix, suffix=parts[-1].suffix + suffix)


# A grave accent, an acute accent or a prime typed between two letters for an apostrophe (`J`ai`, `C´est`, a keyboard's
# dead key): the model read them as unknown pieces (the first 300 dev sentences so typed lost 21-25 BLEU).
_TYPED_APOSTROPHE = re.compile(r"(?<=[^\W\d_])[`´′](?=[^\W\d_])")


def _as_apostrophes(text: str) -> str:
    return _TYPED_APOSTROPHE.sub("'", text) if any(c in text for c in "`´′") else text


# A list's bullet or number before a sentence: `- `, `• `, `* `, `1. `, `2) `, `(3) `, `a) `, `(b) `; a quoted
# e-mail's `> ` and `>> `, a Markdown heading's `## `.
_LIST_MARK = re.compile(r"\s*(?:[-–—•·*▪►‣◦●○■□➢➤✓✔]|\(?\d{1,3}[.)]|\(\d{1,3}\)|\(?[a-zA-Z]\)|>+|#{1,6})\s+")
# Month names that follow a day's number and its period in a date (`1. Mai`, `3. října`, `15. tammikuuta`): no list.
MONTHS = frozenset(
    """
    januar jänner februar märz april mai juni juli august september oktober november dezember januari februari
    maart mei augustus december mars marts maj augusti jan feb febr mär apr jun jul aug sep sept okt nov dez dec
    stycznia lutego marca kwietnia maja czerwca lipca sierpnia września października listopada grudnia ledna února
    března dubna května června července srpna září října listopadu prosince januára februára apríla mája júna júla
    augusta septembra októbra novembra decembra siječnja veljače ožujka travnja svibnja lipnja srpnja kolovoza rujna
    listopada studenoga prosinca januarja februarja marca aprila maja junija julija avgusta septembra oktobra
    novembra decembra tammikuuta helmikuuta maaliskuuta huhtikuuta toukokuuta kesäkuuta heinäkuuta elokuuta
    syyskuuta lokakuuta marraskuuta joulukuuta
    """.split()
)
# Quotes and brackets that may hold a whole sentence, and what closes each. Guillemets and low-9 quotes are written
# back as `"` (`_QUOTES_OUT`), the ASCII quote any language's text can hold and the one corpora into English use (the
# 210 French sources of Tatoeba's training pairs in « »: 181 English targets in " ", none in « »); given them,
# the quickstart model began 263 of 300 translations with "I" (it read `«` as `"I`). 「Japanese」 quotes are the
# model's to translate.
_ENCLOSING = {'"': '"', "“": "”", "(": ")", "[": "]", "«": "»", "„": "“"}


def _edge_tags(text: str) -> tuple[int, int] | None:
    """The lengths of the tags (and the white space after or before them) at the start and at the end of `text`
    when what is between them holds a letter or digit and no `<` or `>`; None where there are none. Read tag by
    tag from each end, in linear time (one regular expression for it all took seconds on a line of spaces)."""
    start = 0
    while (tag := _ONE_TAG.match(text, start)) is not None:
        start = tag.end()
        while start < len(text) and text[start].isspace():
            start += 1
    end = len(text)
    while end > start and text[end - 1] == ">":
        opening = text.rfind("<", start, end)
        if opening < 0 or _ONE_TAG.fullmatch(text, opening, end) is None:
            break
        end = opening
        while end > start and text[end - 1].isspace():
            end -= 1
    inner = text[start:end]
    if (start, end) == (0, len(text)) or "<" in inner or ">" in inner or not any(c.isalnum() for c in inner):
        return None
    return start, len(text) - end


def _apostrophes_only(text: str) -> bool:
    """Whether every single quote in `text` stands between two letters, as an apostrophe does (`J'ai`, `aujourd’hui`)."""
    return all(
        0 < i < len(text) - 1 and text[i - 1].isalpha() and text[i + 1].isalpha()
        for i, char in enumerate(text) if char in "'‘’"
    )


def _outside_tags(quotes: re.Pattern[str], text: str) -> str:
    """`text` with the marks `quotes` finds written as `"`, outside the tags in it."""
    pieces = re.split(r"(<[^<>]*>)", text)
    return "".join(piece if piece.startswith("<") else quotes.sub('"', piece) for piece in pieces)
_QUOTES_OUT = (re.compile("[«„][ \u00a0\u202f]*"), re.compile("[ \u00a0\u202f]*[»“]"))
# Markup around a sentence (a line of HTML or XML, Markdown's emphasis): the model trained on plain text never saw it.
_ONE_TAG = re.compile(_TAG)
_EMPHASIS = ("**", "__", "~~", "*", "_")  # `_` and `__` around words only (`__init__` is a name)


def frame(text: str) -> tuple[str, str, str]:
    """(prefix, inner, suffix): `text` is `prefix + inner + suffix`, where the prefix is a list's bullet or number
    and the white space after it (not a day's number before its month, `1. Mai`, or a number before another,
    `24. 12. 2024`), or a double quote or bracket whose closing one ends the text, or markup around it (an HTML or
    XML element, Markdown's emphasis: `_enclosing`) (then the suffix, white space inside them kept with them), or
    emoji before a sentence's start or after its end; ("", text, "") where there is
    none, or nothing to translate would be left. A model trained on plain sentence pairs translates the sentence
    inside better than the whole: the quickstart model translated 300 dev sentences in double quotes at BLEU 20.94
    against their references in quotes, and 44.28 with the quotes kept around the translation of the sentence inside
    them; in brackets 15.02 against 44.28; as a list's items (`• `) 17.44 against 41.35; followed by an emoji 31.16
    against 41.25. Guillemets and „“ come off too, written back as `"` (`_ENCLOSING`): in « », 36.96 against
    references in double quotes, 58.81 so (「」 are left to the model). Markup: the
    first 300 dev sentences in `<b>...</b>` scored 20.69 (the tags taken off both sides), 52.51 without them."""
    stripped = text.strip()
    if not stripped:
        return "", text, ""
    lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]
    if (mark := _LIST_MARK.match(text)) and not _a_date(text[mark.end() :], mark.group()):
        prefix, inner, suffix = text[: mark.end()], text[mark.end() :], ""
    elif (marks := _enclosing(stripped)) is not None:
        opening, closing = marks  # (either may be 0: markup on one side only)
        inner = stripped[opening : len(stripped) - closing]
        spaced = len(inner) - len(inner.lstrip()), len(inner) - len(inner.rstrip())
        prefix = lead + stripped[:opening] + inner[: spaced[0]]
        suffix = inner[len(inner) - spaced[1] :] + stripped[len(stripped) - closing :] + trail
        inner = inner.strip()
    elif (edges := _edge_tokens(stripped)) is not None:
        start, end = edges
        body = stripped[start:end]
        inner = body.strip()
        prefix = lead + stripped[:start] + body[: len(body) - len(body.lstrip())]
        suffix = body[len(body.rstrip()) :] + stripped[end:] + trail
    else:
        start, end = 0, len(stripped)
        while start < end and (_emoji(stripped[start]) or stripped[start].isspace()):
            start += 1
        while end > start and (_emoji(stripped[end - 1]) or stripped[end - 1].isspace()):
            end -= 1
        if start and _sentence_start(stripped[start:]) is None:
            start = 0  # `🍕 est bon`: the emoji is the subject
        if end < len(stripped) and stripped[:end].rstrip()[-1:] not in _ENDS + "\"')»”":
            end = len(stripped)  # `J'aime les 🍕`: the emoji is the object
        if start == 0 and end == len(stripped):
            return "", text, ""
        body = stripped[start:end]
        inner = body.strip()
        prefix = lead + stripped[:start] + body[: len(body) - len(body.lstrip())]
        suffix = body[len(body.rstrip()) :] + stripped[end:] + trail
    if not any(c.isalnum() for c in inner):
        return "", text, ""
    return prefix, inner, suffix


# What no model translates, copied as it is: a web address, an e-mail address, an @mention or #hashtag, a text
# emoticon. Taken off the edges of a sentence (`@marie J'ai faim.`, `Écris-moi à tom@example.com`, `Merci :)`):
# the quickstart model dropped every one of them, and garbled the sentence around them.
_UNTRANSLATABLE = re.compile(
    r"(?:https?://|ftp://|www\.)\S+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+[.,;:!?]?|[@#][^\W_][\w-]*[.,;:!?]?"
    r"|[:;=][-'^]?[()\[\]DPpOo/|*]+|[xX]D+|<3+|\^\^|:'\(|¯\\_\(ツ\)_/¯"
)


def _edge_tokens(text: str) -> tuple[int, int] | None:
    """(start, end) of `text` (stripped) once the words of it that no model translates (`_UNTRANSLATABLE`) are taken
    off its start and its end; None where there are none, or nothing with a letter would be left."""
    start, end = 0, len(text)
    while (m := re.match(r"\S+\s+", text[start:end])) and _UNTRANSLATABLE.fullmatch(m.group().rstrip()):
        start += m.end()
    if start and _sentence_start(text[start:]) is None:
        start = 0  # `#1 des ventes`, `@marie a faim`: a word of the sentence, its subject
    # the last word, split off (a search for `\s+\S+$` took seconds on a line of spaces)
    while len(words := text[start:end].rsplit(None, 1)) == 2 and _UNTRANSLATABLE.fullmatch(words[1]):
        end = start + len(words[0])
    if (start, end) == (0, len(text)) or not any(c.isalpha() for c in text[start:end]):
        return None
    return start, end


def untranslatable(text: str) -> bool:
    """Whether `text` is nothing but words no model translates (a web or e-mail address, mentions, emoticons)."""
    words = text.split()
    return bool(words) and all(_UNTRANSLATABLE.fullmatch(w) for w in words)


def _enclosing(text: str) -> tuple[int, int] | None:
    """The lengths of the marks that enclose all of `text` (stripped) and hold nothing else of their kind: double
    quotes or brackets (`_ENCLOSING`), markup (tags before or after a text that holds none, `<li><b>...</b></li>`,
    `<p>...`, `...</p>` of an element a split cut in two; or one element around markup of its own, `<p>... <b>
    ...</b> ...</p>`), or Markdown's emphasis (`**...**`, `*...*`, `__...__`, `_..._`, `~~...~~`, nothing but a
    word's own marks inside them)."""
    if (closer := _ENCLOSING.get(text[0])) and len(text) > 2 and text[-1] == closer:
        return None if any(c in text[1:-1] for c in (text[0], closer)) else (1, 1)
    if text[0] in "'‘" and text[-1] in "'’" and len(text) > 2 and _apostrophes_only(text[1:-1]):
        return 1, 1  # `'Je suis là.'`, `‘J’ai faim.’`: single quotes, the ones inside it apostrophes
    edges = _edge_tags(text)  # tags on either side and none between: `<ul><li>Il pleut.</li>` of a split
    if edges is not None:
        return edges
    if (start := _START_TAG.match(text)) and text.endswith(end := f"</{start[1]}>") and len(text) > start.end() + len(end):
        inner = text[start.end() : -len(end)]
        depth = 0  # the element's own name inside it: `<b>a</b> et <b>b</b>` is no one element
        for tag in re.finditer(rf"<(/?){re.escape(start[1])}(?=[\s>/])[^<>]*>", inner):
            depth += -1 if tag[1] else 0 if tag[0].endswith("/>") else 1
            if depth < 0:
                return None
        return (start.end(), len(end)) if depth == 0 else None
    for mark in _EMPHASIS:
        inner = text[len(mark) : -len(mark)]
        if text.startswith(mark) and text.endswith(mark) and inner.strip() == inner and inner and mark[0] not in inner:
            return (len(mark), len(mark)) if mark[0] != "_" or " " in inner else None
    return None


def _a_date(rest: str, mark: str) -> bool:
    """Whether a number and its period before `rest` are a date's day (`1. Mai`, `24. 12. 2024`), not a list's."""
    if not mark.rstrip().endswith(".") or not mark.strip()[:1].isdigit():
        return False
    word = rest.split(None, 1)[0].rstrip(".,").lower() if rest.strip() else ""
    return word[:1].isdigit() or word in MONTHS


def _emoji(char: str) -> bool:
    """An emoji or pictograph (Unicode's symbols from U+2600 to U+2BFF and from U+1F000 on: not °, ®, ™, an arrow or
    a CJK unit such as ㎏), or a joiner, variation selector, skin tone or tag of one (the flags of 🏴 sequences)."""
    if char in "\u200d\ufe0e\ufe0f\u20e3" or "\U0001f3fb" <= char <= "\U0001f3ff" or "\U000e0020" <= char <= "\U000e007f":
        return True
    code = ord(char)
    return (0x2600 <= code <= 0x2BFF or code >= 0x1F000) and unicodedata.category(char) in ("So", "Sk")
