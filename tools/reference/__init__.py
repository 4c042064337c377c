"""Reference-figure generators for tapegrad's tests.

Every module in this package that defines ``generate(outdir)`` is run by
tools/make_reference.py and writes one or more JSON files into ``outdir``
(tests/ref/). Run with Debian's /usr/bin/python3 (python3-torch 1.13).
"""
