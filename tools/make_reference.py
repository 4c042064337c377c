#!/usr/bin/python3
"""Regenerate tapegrad's committed PyTorch reference files (tests/ref/*.json).

Run with Debian's python3 (python3-torch 1.13):

    /usr/bin/python3 tools/make_reference.py [--out tests/ref] [module ...]

Every module of the tools/reference package that defines generate(outdir) is
run, in name order (or only the modules named on the command line).

The generators that run the book's own code (decoder, decoder_train, dpo,
export, gemma3, gemma3_train) need LLMS_FROM_SCRATCH_DIR (the book's package
folder; dpo's, gemma3's and export's also read its notebooks:
LLMS_FROM_SCRATCH_ROOT, default the parent of that folder); export also runs a
built tapegrad ($TAPEGRAD);
without them they say why and write nothing (see their docstrings).
"""
import argparse
import importlib
import os
import pkgutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# The references hold the bits of OpenBLAS's Haswell kernels, whatever the
# CPU (docs/numerics.md; the tests pin the same family: tests/meson.build,
# ref_blas). OpenBLAS reads this when torch loads it, so before any import
# of torch.
os.environ["OPENBLAS_CORETYPE"] = "Haswell"

import reference  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "ref"),
                    help="output directory (default tests/ref)")
    ap.add_argument("modules", nargs="*", help="only these reference modules")
    args = ap.parse_args()

    import torch
    if not torch.__version__.startswith("1.13"):
        print("warning: references are meant to come from torch 1.13, this is %s"
              % torch.__version__, file=sys.stderr)
    torch.set_num_threads(1)  # deterministic reductions

    outdir = os.path.normpath(args.out)
    os.makedirs(outdir, exist_ok=True)
    names = sorted(m.name for m in pkgutil.iter_modules(reference.__path__))
    if args.modules:
        unknown = set(args.modules) - set(names)
        if unknown:
            ap.error("unknown reference module(s): " + ", ".join(sorted(unknown)))
        names = [n for n in names if n in args.modules]
    ran = 0
    for name in names:
        mod = importlib.import_module("reference." + name)
        gen = getattr(mod, "generate", None)
        if gen is None:
            continue
        print("== reference.%s" % name)
        gen(outdir)
        ran += 1
    print("ran %d generator(s) into %s" % (ran, outdir))


if __name__ == "__main__":
    main()
