#!/usr/bin/env python3
"""Checks the man page tapegrad.1 (tools/make_man.py) against the executable.

    tests/check_man.py TAPEGRAD PAGE

- the page exists and is a man page (.TH; the version tapegrad --version
  prints), with NAME, SYNOPSIS, DESCRIPTION, COMMANDS, EXIT STATUS and SEE
  ALSO;
- it renders without a warning: `groff -man -Tutf8 -ww`, or `man -l` where
  groff is missing (neither: that part is skipped and the rest is checked on
  the page's source);
- every command `tapegrad --help` lists has its section, and every option
  (--xxx) of each command's --help, and of its subcommands' (`usage:
  tapegrad finetune classify|instruct ...`), is in the page;
- each of those help texts is in the rendered page line for line, so the
  escaping lost nothing, and so is every line of tapegrad --help (filled:
  compared without blanks and dashes).

Exit status 0 if all passed, 1 otherwise.
"""
import os
import re
import shutil
import subprocess
import sys

failed = 0


def check(ok, what):
    global failed
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failed += 1
    return ok


def run(cmd, **kw):
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=120, **kw)


def help_text(exe, args):
    p = run([exe] + args + ["--help"])
    if p.returncode != 0:
        check(False, "tapegrad %s --help exits %d" % (" ".join(args), p.returncode))
        return []
    return [line.rstrip() for line in p.stdout.decode("utf-8", "replace").expandtabs().rstrip().split("\n")]


def commands_of(top):
    """The names under "commands:" in tapegrad --help."""
    names, inside = [], False
    for line in top:
        if line.strip() == "commands:":
            inside = True
        elif inside and not line.strip():
            break
        elif inside:
            m = re.match(r"^  (\S+)\s{2,}", line)
            if m:
                names.append(m.group(1))
    return names


def subcommands(cmd, usage):
    words = usage.split()
    if len(words) >= 4 and words[:3] == ["usage:", "tapegrad", cmd] and \
            re.match(r"^[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)+$", words[3]):
        return words[3].split("|")
    return []


def unescape(source):
    """The page's text from its troff source, for when nothing renders it."""
    lines = [l for l in source.split("\n") if not re.match(r"^\.(\\\"|TH|nf|fi|sp|PP|TP|in|RS|RE)\b", l)]
    lines = [re.sub(r'^\.(?:SH|SS) "?(.*?)"?$', r"\1", l) for l in lines]
    text = "\n".join(re.sub(r"^\.(B|I|BR|IR|RB) ", "", l) for l in lines)
    named = {"aq": "'", "ga": "`", "ha": "^", "ti": "~"}
    text = re.sub(r"\\\((\w\w)", lambda m: named.get(m.group(1), "?"), text)
    text = re.sub(r"\\\[u([0-9A-F]{4,5})\]", lambda m: chr(int(m.group(1), 16)), text)
    text = re.sub(r"\\f[BIRP]", "", text)
    return text.replace("\\-", "-").replace("\\&", "").replace("\\e", "\\")


def render(page):
    """(rendered text or None, what rendered it); a warning fails the check."""
    env = dict(os.environ, MANWIDTH="80", MAN_DISABLE_SECCOMP="1", LC_ALL="C.UTF-8")
    if shutil.which("groff"):
        cmd = ["groff", "-man", "-Tutf8", "-ww", page]
    elif shutil.which("man"):
        cmd = ["man", "--warnings", "-l", page]
    else:
        print("skip rendering: neither groff nor man is installed; checking the page's source")
        return None, "source"
    p = run(cmd, env=env)
    err = p.stderr.decode("utf-8", "replace").strip()
    if cmd[0] == "man" and p.returncode != 0 and not p.stdout.strip():
        print("skip rendering: man -l renders nothing here (%s); checking the page's source" % err.splitlines()[0])
        return None, "source"
    check(p.returncode == 0 and not err, "%s renders it without warnings%s" % (
        " ".join(cmd[:-1]), "" if not err else ":\n    " + "\n    ".join(err.splitlines()[:10])))
    text = p.stdout.decode("utf-8", "replace")
    text = re.sub(r".\x08", "", text)                 # overstrike bold and underline
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)         # SGR, where grotty uses it
    # what a formatter may draw for -, ', `, ^ and ~
    for a, b in {"\u2212": "-", "\u2010": "-", "\u2019": "'", "\u2018": "`", "\u02c6": "^", "\u02dc": "~"}.items():
        text = text.replace(a, b)
    return text, cmd[0]


def contains_block(text, block):
    """Whether the block's non-blank lines are consecutive non-blank lines of text, under one indent."""
    have = [l.rstrip() for l in text.split("\n") if l.strip()]
    want = [l for l in block if l.strip()]
    if not want:
        return True
    for i, line in enumerate(have):
        if line.endswith(want[0]):
            indent = line[: len(line) - len(want[0])]
            if indent.strip():
                continue
            if have[i:i + len(want)] == [indent + w for w in want]:
                return True
    return False


def main():
    if len(sys.argv) != 3:
        print("usage: check_man.py TAPEGRAD PAGE", file=sys.stderr)
        return 2
    exe, page = sys.argv[1:]
    if not check(os.path.isfile(page) and os.path.getsize(page) > 0, "%s exists" % os.path.basename(page)):
        return 1
    with open(page, "rb") as f:
        raw = f.read()
    if not check(all(b < 128 for b in raw), "the page is ASCII (other characters escaped)"):
        return 1
    source = raw.decode("ascii")
    th = re.search(r"^\.TH .*$", source, re.M)
    check(th is not None, "the page has a .TH header")
    v = run([exe, "--version"])
    version = v.stdout.decode().strip()
    if v.returncode == 0 and version:
        check(th is not None and ('"%s"' % version) in th.group(0), "the header names '%s'" % version)

    text, how = render(page)
    if text is None:
        text = unescape(source)
    for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "EXIT STATUS", "SEE ALSO"]:
        check(re.search(r"^%s\s*$" % section, text, re.M) is not None, "section %s" % section)

    top = help_text(exe, [])
    commands = commands_of(top)
    check(len(commands) > 0, "tapegrad --help lists commands: %s" % " ".join(commands))
    # the top-level text is filled (and may be hyphenated): each of its lines,
    # without blanks and dashes, must be in the page's text without them
    flat = re.sub(r"[\s-]", "", text)
    lost = [l.strip() for l in top[1:] if l.strip() and l.strip() != "commands:"
            and re.sub(r"[\s-]", "", re.sub(r"^Exit status:", "", l.strip())) not in flat]
    check(not lost, "tapegrad --help's text is in the page%s" % (
        "" if not lost else "; not: " + " | ".join(lost[:5])))
    helps = []
    for cmd in commands:
        lines = help_text(exe, [cmd])
        helps.append(([cmd], lines))
        for sub in subcommands(cmd, lines[0] if lines else ""):
            helps.append(([cmd, sub], help_text(exe, [cmd, sub])))
    for words, lines in helps:
        name = "tapegrad " + " ".join(words)
        if not lines:
            continue
        check(re.search(r"^\s*%s\s*$" % re.escape(name), text, re.M) is not None, "'%s' has a section" % name)
        options = sorted(set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", "\n".join(lines))))
        missing = [o for o in options if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(o), text)]
        check(not missing, "%s: %d options in the page%s" % (
            name, len(options), "; missing: " + " ".join(missing) if missing else ""))
        check(contains_block(text, lines), "%s --help: its %d lines are in the page (%s)" % (name, len(lines), how))
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
