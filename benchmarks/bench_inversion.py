"""Training cost of the transformer inversion attack (``TransformerInversionAttack``).

Default (short): trains a small decoder for ``--steps`` optimiser steps on the first sentences
of the public corpus (``docs/experiments/inversion_corpus.py``, or seeded synthetic clinical
notes with ``--synthetic`` when no corpus was built) and prints one table: seconds per step,
sentences per second, the loss at the start and at the end, parameters.

``--full``: the pretraining the experiments use -- every embedded corpus sentence, ``--epochs``
epochs, then the correction stage (the model's own hypotheses on ``--correction`` texts,
re-embedded with all-MiniLM-L6-v2) -- checkpointed and saved under the user cache
(``privembed.core.cache.cache_dir("inversion", "models", NAME)``), never in the repository.

``--corrector-only``: the correction stage alone on a saved model (how the committed model was
finished: its ``--full`` run was stopped at the step-300 checkpoint to fit the machine).

Run:
    nice -n 10 python benchmarks/bench_inversion.py                 # short, ~5 min here
    nice -n 10 python benchmarks/bench_inversion.py --full --name gcide-base   # the pretraining
    nice -n 10 python benchmarks/bench_inversion.py --corrector-only --correction 600

Wall-clock rates depend on what else runs on the machine; the CPU time of this process is
printed next to them.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "experiments"))

#: the architecture the experiments use (small enough for 2 shared CPU cores)
FULL = {
    "d_model": 128,
    "layers": 2,
    "heads": 4,
    "prefix": 4,
    "max_len": 32,
    "max_vocabulary": 5000,
    "batch_size": 64,
    "lr": 1e-3,
    "dropout": 0.0,
}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def corpus(limit: int, synthetic: bool) -> tuple[list[str], np.ndarray, str]:
    if not synthetic:
        try:
            from inversion_corpus import load_available

            texts, X = load_available(limit)
            return texts, X, f"public corpus (first {len(texts)} sentences)"
        except FileNotFoundError as exc:
            print(f"{exc}; using synthetic notes", flush=True)
    from privembed.attacks import pii_corpus
    from privembed.data.embedders import Embedder

    c = pii_corpus(limit, seed=0)
    X = np.asarray(Embedder().encode(c.texts), dtype=np.float64)
    return c.texts, X, f"synthetic clinical notes ({limit})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--full", action="store_true", help="the full pretraining (saved to the cache)")
    ap.add_argument("--steps", type=int, default=40, help="steps of the short run")
    ap.add_argument("--sentences", type=int, default=0, help="corpus sentences (0: all embedded)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--correction", type=int, default=3000)
    ap.add_argument("--correction-epochs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--name", default="gcide-base")
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument(
        "--corrector-only",
        action="store_true",
        help="load the saved model NAME (e.g. a checkpoint of a stopped --full run) and train "
        "only its correction mode on --correction corpus texts",
    )
    ap.add_argument(
        "--device",
        default="cpu",
        help="torch device (cuda: bfloat16 training; the GPU-sized run of the experiments is "
        "docs/experiments/inversion_gpu.py)",
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch

    from privembed.attacks import TransformerInversionAttack
    from privembed.core.cache import cache_dir
    from privembed.data.embedders import Embedder

    limit = args.sentences or (0 if args.full or args.corrector_only else 4000)
    texts, X, source = corpus(limit, args.synthetic)
    if args.full or args.corrector_only:
        params = {
            **FULL,
            "epochs": args.epochs,
            "correction": args.correction,
            "correction_epochs": args.correction_epochs,
        }
    else:
        params = {**FULL, "epochs": 1, "correction": 0}
    if args.corrector_only:
        atk = TransformerInversionAttack.load(
            cache_dir("inversion", "models", args.name), num_threads=args.threads,
            correction=args.correction, device=args.device,
            correction_epochs=args.correction_epochs,
        )  # fmt: skip
    else:
        atk = TransformerInversionAttack(**params, num_threads=args.threads, device=args.device)
    embedder = Embedder() if args.full or args.corrector_only else None
    t0, c0 = time.time(), time.process_time()
    marks: list[tuple[int, float, float, float]] = []
    full = args.full or args.corrector_only
    out = cache_dir("inversion", "models", args.name) if full else None

    class Stop(Exception):
        pass

    def on_step(step: int, loss: float) -> None:
        marks.append((step, loss, time.time() - t0, time.process_time() - c0))
        if step % 50 == 0:
            print(f"step {step} loss {loss:.3f} {time.time() - t0:.0f}s", flush=True)
        if out is not None and step % 300 == 0:
            atk.save(out)  # checkpoint (the network and vocabulary exist from the first step)
        if not full and step >= args.steps:
            raise Stop

    try:
        if args.corrector_only:
            assert embedder is not None
            start = atk.steps_
            atk.fit_corrector(texts, X, embed=embedder.encode, rng=args.seed, on_step=on_step)
        else:
            start = 0
            atk.fit(
                texts,
                X,
                embed=None if embedder is None else (lambda t: embedder.encode(t)),
                rng=args.seed,
                on_step=on_step,
            )
    except Stop:
        pass
    wall, cpu = time.time() - t0, time.process_time() - c0
    n_params = sum(p.numel() for p in atk.model_.parameters())
    steps = marks[-1][0] - start
    first = float(np.mean([m[1] for m in marks[:5]]))
    last = float(np.mean([m[1] for m in marks[-20:]]))
    print()
    print(
        f"machine: {cpu_model()}, {os.cpu_count()} cores (shared with other jobs; load average "
        f"{os.getloadavg()[0]:.1f} at the end), torch {torch.__version__}, "
        f"{args.threads} threads, python {platform.python_version()}, device {args.device}"
    )
    print(f"corpus: {source}; vocabulary {len(atk.vocabulary_)} pieces; {n_params:,} parameters")
    print()
    print("| run | steps | wall s | CPU s | s/step | sentences/s | loss first 5 | loss last 20 |")
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {'corrector' if args.corrector_only else 'full' if args.full else 'short'} | {steps} | {wall:.0f} | {cpu:.0f} | "
        f"{wall / steps:.2f} | {steps * atk.batch_size / wall:.1f} | {first:.3f} | {last:.3f} |"
    )
    if atk.correction_history_:
        print(f"correction stage: epoch losses {[round(v, 3) for v in atk.correction_history_]}")
    if out is not None:
        atk.save(out)
        print(f"saved to {out}")


if __name__ == "__main__":
    main()
