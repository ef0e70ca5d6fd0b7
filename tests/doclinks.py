#!/usr/bin/env python3
"""doclinks.py - checks that every relative link of the docs resolves.

Usage: doclinks.py FILE.md...  Every [text](target) and ![alt](target) outside code (fenced
blocks and `spans`) whose target is not a URL must name a file or folder that exists, relative to
the page; a #fragment, on its own or after a .md target, must be the GitHub slug of one of that
page's headings. Prints one line per broken link (page:line: target: reason), then a count; exit
status 1 when any is broken.
"""
import os
import re
import sys

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose_lines(text, spans=True):
    """(line number, line) outside fenced code; inline code spans blanked unless spans is False."""
    fenced = False
    for i, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield i, re.sub(r"`[^`]*`", "", line) if spans else line


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return s.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    with open(path, encoding="utf-8") as f:
        for _, line in prose_lines(f.read(), spans=False):
            m = re.match(r"#{1,6} (.*)", line)
            if m:
                base = slug(m.group(1))
                k = seen.get(base, 0)
                seen[base] = k + 1
                out.add(base if k == 0 else "%s-%d" % (base, k))
    return out


def check(page):
    bad = []
    with open(page, encoding="utf-8") as f:
        text = f.read()
    for ln, line in prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(dest):
                bad.append("%s:%d: %s: no such file %s" % (page, ln, target, dest))
            elif frag and dest.endswith(".md") and frag not in anchors(dest):
                bad.append("%s:%d: %s: no heading #%s in %s" % (page, ln, target, frag, dest))
    return bad


def main(pages):
    bad = [b for p in pages for b in check(p)]
    for b in bad:
        print(b)
    print("doclinks: %d pages, %d broken links" % (len(pages), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
