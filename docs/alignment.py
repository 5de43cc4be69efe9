"""The README's alignment figures: how often `tfm inspect-attn --align` picks a right source word, layer by layer.

    python docs/alignment.py RUN

Twenty pairs of the bundled dev set, each target (the reference, teacher-forced) aligned by hand below: for every
target word that has a counterpart, the source words that are right for it (a verb's auxiliary, a clitic glued to its
verb: `Donne-moi` for both `Give` and `me`). Words are those `--words` and `--align` count: split at spaces, with
punctuation before or after a word a word of its own. For each decoder layer (the mean of its heads) it prints the
share of target words whose most-attended source word is a right one, from the row that predicts the word (what
`--align` reads) and from the row that reads it (the step after), apart for words and for punctuation.
"""

from __future__ import annotations

import argparse

from tfm_cli import Translator
from tfm_cli.attention import alignment, attention_report, merge_words

PAIRS = [
 ("Tom a été heurté par une voiture.", "A car hit Tom.", {"A": ["une"], "car": ["voiture"], "hit": ["heurté", "été", "a"], "Tom": ["Tom"], ".": ["."]}),
 ("Je déteste le fromage de chèvre.", "I hate goat cheese.", {"I": ["Je"], "hate": ["déteste"], "goat": ["chèvre"], "cheese": ["fromage"], ".": ["."]}),
 ("Donne-moi un crayon rouge.", "Give me a red pencil.", {"Give": ["Donne-moi"], "me": ["Donne-moi"], "a": ["un"], "red": ["rouge"], "pencil": ["crayon"], ".": ["."]}),
 ("Tom peut être un traître.", "Tom may be a traitor.", {"Tom": ["Tom"], "may": ["peut"], "be": ["être"], "a": ["un"], "traitor": ["traître"], ".": ["."]}),
 ("Puis-je vous servir un verre ?", "Can I make you a drink?", {"Can": ["Puis-je"], "I": ["Puis-je"], "make": ["servir"], "you": ["vous"], "a": ["un"], "drink": ["verre"], "?": ["?"]}),
 ("Pourquoi êtes-vous si arrogant ?", "Why are you so arrogant?", {"Why": ["Pourquoi"], "are": ["êtes-vous"], "you": ["êtes-vous"], "so": ["si"], "arrogant": ["arrogant"], "?": ["?"]}),
 ("Que dites-vous d'une tasse de café ?", "How about a cup of coffee?", {"How": ["Que", "dites-vous"], "about": ["dites-vous", "d'une"], "a": ["d'une"], "cup": ["tasse"], "of": ["de"], "coffee": ["café"], "?": ["?"]}),
 ("Elle est gentille avec les personnes âgées.", "She is kind to old people.", {"She": ["Elle"], "is": ["est"], "kind": ["gentille"], "to": ["avec"], "old": ["âgées"], "people": ["personnes"], ".": ["."]}),
 ("De toute évidence, j'ai fait une erreur.", "Obviously I made a mistake.", {"Obviously": ["De", "toute", "évidence"], "I": ["j'ai"], "made": ["fait", "j'ai"], "a": ["une"], "mistake": ["erreur"], ".": ["."]}),
 ("Tu dois continuer à t'exercer.", "You must continue to train.", {"You": ["Tu"], "must": ["dois"], "continue": ["continuer"], "to": ["à"], "train": ["t'exercer"], ".": ["."]}),
 ("Je les ai invités à la fête.", "I invited them to the party.", {"I": ["Je"], "invited": ["invités", "ai"], "them": ["les"], "to": ["à"], "the": ["la"], "party": ["fête"], ".": ["."]}),
 ("Mary n'a porté aucun bijou.", "Mary didn't wear any jewelry.", {"Mary": ["Mary"], "didn't": ["n'a"], "wear": ["porté"], "any": ["aucun"], "jewelry": ["bijou"], ".": ["."]}),
 ("Nous avons trouvé toutes les caisses vides.", "We found all the boxes empty.", {"We": ["Nous"], "found": ["trouvé", "avons"], "all": ["toutes"], "the": ["les"], "boxes": ["caisses"], "empty": ["vides"], ".": ["."]}),
 ("Je n'ai jamais su son vrai nom.", "I never learned his real name.", {"I": ["Je"], "never": ["jamais", "n'ai"], "learned": ["su"], "his": ["son"], "real": ["vrai"], "name": ["nom"], ".": ["."]}),
 ("Tom n'a eu d'autre choix que de rester.", "Tom had no choice but to stay.", {"Tom": ["Tom"], "had": ["eu", "n'a"], "no": ["n'a", "d'autre"], "choice": ["choix"], "but": ["que"], "to": ["de"], "stay": ["rester"], ".": ["."]}),
 ("C'est une belle journée.", "It's a fine day.", {"It's": ["C'est"], "a": ["une"], "fine": ["belle"], "day": ["journée"], ".": ["."]}),
 ("Je me sens mieux aujourd'hui.", "I feel better today.", {"I": ["Je", "me"], "feel": ["sens"], "better": ["mieux"], "today": ["aujourd'hui"], ".": ["."]}),
 ("Tom s'est caché derrière un arbre.", "Tom hid behind a tree.", {"Tom": ["Tom"], "hid": ["caché", "s'est"], "behind": ["derrière"], "a": ["un"], "tree": ["arbre"], ".": ["."]}),
 ("Est-ce que ta sœur est mariée ?", "Is your sister married?", {"Is": ["est", "Est-ce"], "your": ["ta"], "sister": ["sœur"], "married": ["mariée"], "?": ["?"]}),
 ("Je pensais que tu étais heureuse.", "I assumed you were happy.", {"I": ["Je"], "assumed": ["pensais"], "you": ["tu"], "were": ["étais"], "happy": ["heureuse"], ".": ["."]}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a run directory or release (e.g. runs/tiny)")
    args = parser.parse_args()
    translator = Translator.load(args.run, device="cpu", precision="fp32")
    right: dict[tuple[int, str, str], list[bool]] = {}
    for source, target, gold in PAIRS:
        report = attention_report(translator, source, target)
        words = merge_words(report)
        src, tgt = words.src_tokens[:-1], words.tgt_tokens[:-1]  # without </s>
        missing = set(gold) - set(tgt)
        if missing:
            raise SystemExit(f"{target!r} is split into {tgt}, without {sorted(missing)}: the word split changed")
        for layer in range(report.n_layers["decoder"]):
            weights = words.matrix("cross", layer, None)
            predicted = dict((j, i) for i, j in alignment(report, layer))  # --align --layer N: the row that predicts
            for j, word in enumerate(tgt):
                if word not in gold:
                    continue
                read = max(range(len(src)), key=lambda i: float(weights[j + 1, i]))  # the row that reads it
                what = "punctuation" if not any(ch.isalnum() for ch in word) else "words"
                right.setdefault((layer, "predicts", what), []).append(src[predicted[j]] in gold[word])
                right.setdefault((layer, "reads", what), []).append(src[read] in gold[word])
    print(f"{args.run}: a right source word, of {len(PAIRS)} hand-aligned dev pairs (mean of the heads)")
    print("layer\trow\twords\tpunctuation\tall")
    for layer, row in sorted({(layer, row) for layer, row, _ in right}):
        cells = [right[(layer, row, "words")], right[(layer, row, "punctuation")]]
        total = [x for cell in cells for x in cell]
        print(f"{layer + 1}\t{row}\t" + "\t".join(f"{sum(c)}/{len(c)} ({sum(c) / len(c):.0%})" for c in [*cells, total]))


if __name__ == "__main__":
    main()
