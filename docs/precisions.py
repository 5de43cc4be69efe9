"""The README's precision table: translation speed and quality of one model in fp32, bf16 and int8 on the CPU.

    python docs/precisions.py RUN [--repeats 3] [--sentences 2000]

For beam 4 and greedy search, and for 2 threads and 1: sentences/s of `Translator.translate` on the first
`--sentences` dev sentences of the bundled corpus (the median of `--repeats` runs, the precisions interleaved so a
noisy machine slows them alike), dev BLEU (sacrebleu, all of them) and how many translations equal fp32's. It prints
the CPU it ran on with the figures: bf16 is fast only where the CPU has native bf16 (AVX512-BF16 or AMX-BF16; AVX-512
alone emulates it), and on an Intel CPU only with AMX.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from importlib import resources

import sacrebleu
import torch

from tfm_cli import Translator
from tfm_cli.runtime import cpu_has_fast_bf16, cpu_has_native_bf16

PRECISIONS = ("fp32", "bf16", "int8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a run directory or release (e.g. runs/tiny)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per setting (the median is reported)")
    parser.add_argument("--sentences", type=int, default=2000, help="dev sentences translated (at most 2,000)")
    args = parser.parse_args()

    corpus = resources.files("tfm_cli.corpora").joinpath("tatoeba-fr-en/dev.tsv.gz")
    with corpus.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        pairs = [line.rstrip("\n").split("\t") for line in f][: args.sentences]
    sources, references = [p[0] for p in pairs], [p[1] for p in pairs]
    translators = {p: Translator.load(args.run, device="cpu", precision=p) for p in PRECISIONS}
    native = ("no native bf16" if not cpu_has_native_bf16()
              else "native bf16" if cpu_has_fast_bf16() else "native bf16 without AMX: auto is fp32")
    print(f"# {args.run}: {len(sources)} dev sentences; torch {torch.__version__}, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()} ({native})")

    for search, greedy in (("beam 4", False), ("greedy", True)):
        outputs = {p: [str(t) for t in translators[p].translate(sources, greedy=greedy)] for p in PRECISIONS}
        quality = []
        for p in PRECISIONS:
            same = sum(a == b for a, b in zip(outputs[p], outputs["fp32"], strict=True))
            quality.append(f"{p} BLEU {sacrebleu.corpus_bleu(outputs[p], [references]).score:.2f} ({same:,} as fp32)")
        print(f"{search}: " + ", ".join(quality))
        for threads in (2, 1):
            torch.set_num_threads(threads)
            seconds: dict[str, list[float]] = {p: [] for p in PRECISIONS}
            for _ in range(args.repeats):
                for p in PRECISIONS:
                    started = time.perf_counter()
                    translators[p].translate(sources, greedy=greedy)
                    seconds[p].append(time.perf_counter() - started)
            rate = {p: len(sources) / statistics.median(s) for p, s in seconds.items()}
            cells = " | ".join(f"{rate[p]:,.0f}" + (f" ({rate[p] / rate['fp32']:.2f}×)" if p != "fp32" else "") for p in PRECISIONS)
            print(f"| {search} | {threads} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
