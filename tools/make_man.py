#!/usr/bin/env python3
"""Writes the man page tapegrad.1 from the commands' own --help texts.

    tools/make_man.py TAPEGRAD OUTPUT VERSION

TAPEGRAD is the built executable, OUTPUT the page to write, VERSION the
project's version (the page's header; no date, so the same executable always
gives the same page). It runs `tapegrad --help`, whose "commands:" list names
the commands, then `tapegrad CMD --help` for each; a command whose usage line
names subcommands (`usage: tapegrad finetune classify|instruct ...`) has each
one's help run too (`tapegrad finetune classify --help`), and the help texts
that options lead to (EXTRA_HELP) are added after their command's. The page:
NAME, SYNOPSIS (every usage line), DESCRIPTION (the top-level text and the
command list), COMMANDS (each help text as it prints, preformatted), EXIT
STATUS and SEE ALSO. Exit status 0, or 1 with one line on stderr.
"""
import re
import subprocess
import sys

# Help texts that a command's own --help does not lead to: `tapegrad bench
# --help` describes the attention benchmark, `tapegrad bench --model gpt
# --help` the GPT one (--model gpt|classify).
EXTRA_HELP = {"bench": [["--model", "gpt"]]}


class Error(Exception):
    pass


def run_help(exe, args):
    """The text `exe ARGS --help` prints on stdout; Error unless it exits 0 with a usage line."""
    cmd = [exe] + args + ["--help"]
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Error("%s: %s" % (" ".join(cmd), e))
    text = p.stdout.decode("utf-8", "replace").expandtabs().rstrip()
    if p.returncode != 0 or not text.startswith("usage: "):
        why = p.stderr.decode("utf-8", "replace").strip().splitlines()
        raise Error("'%s' exited %d%s" % (" ".join(["tapegrad"] + args + ["--help"]), p.returncode,
                                          ": " + why[0] if why else " without a usage line"))
    return [line.rstrip() for line in text.split("\n")]


def paragraphs(lines):
    """Lines split at blank lines."""
    out, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line)
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def parse_top(lines):
    """(description paragraphs, [(command, description)], other paragraphs, exit status text)."""
    paras = paragraphs(lines[1:])
    description, commands, other, exit_status = [], [], [], None
    for para in paras:
        if para[0].rstrip() == "commands:":
            for line in para[1:]:
                m = re.match(r"^  (\S+)\s{2,}(.*)$", line)
                if m:
                    commands.append([m.group(1), m.group(2).strip()])
                elif commands and line.startswith("   "):
                    commands[-1][1] += " " + line.strip()
                else:
                    raise Error("tapegrad --help: cannot read the command list at '%s'" % line.strip())
        elif not commands:
            description.append(para)
        else:
            # "Exit status:" starts the exit status text, which runs to the paragraph's end
            at = next((i for i, line in enumerate(para) if line.startswith("Exit status:")), None)
            if at is None:
                other.append(para)
            else:
                if at:
                    other.append(para[:at])
                exit_status = " ".join(line.strip() for line in para[at:])[len("Exit status:"):].strip()
    if not commands:
        raise Error("tapegrad --help lists no commands (no 'commands:' paragraph)")
    return description, commands, other, exit_status


def subcommands(cmd, usage):
    """['a', 'b'] when the usage line reads `usage: tapegrad CMD a|b ...`."""
    words = usage.split()
    if len(words) >= 4 and words[:3] == ["usage:", "tapegrad", cmd]:
        w = words[3]
        if "|" in w and re.match(r"^[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)+$", w):
            return w.split("|")
    return []


def esc(text):
    """Text for a troff line: backslashes, dashes, quotes and non-ASCII characters escaped."""
    special = {"\\": "\\e", "-": "\\-", "'": "\\(aq", "`": "\\(ga", "^": "\\(ha", "~": "\\(ti"}
    out = "".join(special.get(c, c) if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in text)
    # a line starting with "." or "'" would be a request (' is already \(aq)
    return "\\&" + out if out.startswith(".") else out


def filled(lines):
    """A paragraph's lines for fill mode: leading blanks dropped (they would break the line)."""
    return [esc(line.strip()) for line in lines]


def preformatted(lines):
    """A help text as a no-fill block, exactly as it prints; blank lines as .sp."""
    out = [".nf"]
    out += [esc(line) if line.strip() else ".sp" for line in lines]
    out.append(".fi")
    return out


def synopsis_line(usage):
    """`usage: tapegrad CMD [SUB] rest` as troff: the command's words in bold."""
    words = usage[len("usage: "):].split(" ")
    n = 1
    while n < len(words) and re.match(r"^[a-z][a-z0-9-]*$", words[n]):
        n += 1
    head = "\\fB%s\\fR" % esc(" ".join(words[:n]))
    rest = " ".join(words[n:])
    return head + (" " + esc(rest) if rest else "")


def page(exe, version):
    top = run_help(exe, [])
    description, commands, other, exit_status = parse_top(top)
    helps = []  # (words after tapegrad, help lines)
    for cmd, _ in commands:
        lines = run_help(exe, [cmd])
        helps.append(([cmd], lines))
        for sub in subcommands(cmd, lines[0]):
            helps.append(([cmd, sub], run_help(exe, [cmd, sub])))
        for extra in EXTRA_HELP.get(cmd, []):
            try:
                helps.append(([cmd] + extra, run_help(exe, [cmd] + extra)))
            except Error as e:
                print("make_man: warning: %s; the page leaves it out" % e, file=sys.stderr)

    name = " ".join(line.strip() for line in description[0]).rstrip(".") if description else "the tapegrad command"
    if re.match(r"^[A-Z][a-z]", name):
        name = name[0].lower() + name[1:]
    out = [
        '.\\" tapegrad.1: made by tools/make_man.py from the --help texts of tapegrad %s.' % version,
        '.TH TAPEGRAD 1 "" "tapegrad %s" "User Commands"' % esc(version),
        # left-aligned and not hyphenated: an option is never split at a line's end
        ".ad l",
        ".nh",
        ".SH NAME",
        "tapegrad \\- " + esc(name),
        ".SH SYNOPSIS",
        ".nf",
        synopsis_line(top[0]),
    ]
    # a command with subcommands is shown by theirs
    parents = {tuple(words[:-1]) for words, _ in helps if len(words) == 2 and not words[1].startswith("-")}
    out += [synopsis_line(lines[0]) for words, lines in helps if tuple(words) not in parents]
    out += ["\\fBtapegrad \\-\\-help\\fR", ".fi"]

    out.append(".SH DESCRIPTION")
    for para in description + other:
        out += [".PP"] + filled(para)
    out += [".PP", "The commands:"]
    for cmd, what in commands:
        out += [".TP", ".B " + esc(cmd), esc(what)]
    out += [".PP", "Each command's options are under COMMANDS, as its \\fB\\-\\-help\\fR prints them."]

    out.append(".SH COMMANDS")
    for words, lines in helps:
        out += ['.SS "tapegrad %s"' % esc(" ".join(words))]
        out += preformatted(lines)

    out.append(".SH EXIT STATUS")
    if exit_status:
        out += filled([exit_status])
        out += [".PP", "A command's own statuses are at the end of its text under COMMANDS."]
    else:
        out += ["As each command's text under COMMANDS gives them."]

    out += [
        ".SH SEE ALSO",
        "The tapegrad manual, in the source tree: README.md (what tapegrad is, the quick start, a map",
        "of the pages) and docs/, a page per topic; docs/cli.md is the command line, docs/gpt2.md,",
        "docs/pretraining.md and docs/fine-tuning.md the GPT-2 commands, docs/numerics.md the",
        "\\fB\\-\\-precision\\fR policies and docs/many-processes.md training under",
        ".BR mpirun (1).",
        ".PP",
        "The library's examples are installed in <prefix>/share/tapegrad/examples/; a program builds",
        "against the library with",
        ".BR pkg\\-config (1):",
        ".PP",
        ".RS",
        ".nf",
        "cc prog.c $(pkg\\-config \\-\\-cflags \\-\\-libs tapegrad)",
        ".fi",
        ".RE",
    ]
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 4:
        print("usage: make_man.py TAPEGRAD OUTPUT VERSION", file=sys.stderr)
        return 1
    exe, output, version = sys.argv[1:]
    try:
        text = page(exe, version)
    except Error as e:
        print("make_man: %s" % e, file=sys.stderr)
        return 1
    with open(output, "w", encoding="ascii", newline="\n") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
