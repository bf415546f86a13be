"""Regenerate what the README shows: two captured runs and a picture of the PR comment.

    python scripts/readme_media.py

The only way to refresh them: it writes the text between the `run-output` markers of
README.md and docs/images/pr-comment.png, from real runs in a scratch directory:

1. `kl-bitexact run`: the bundled suite against the embedded reference engine;
2. `kl-bitexact run --fault NAME`: the same suite with a cache bug injected into every
   reference server, so one test goes red (runs 1 and 2 are the README's captured text);
3. a pull request, the way the comment meets one: a scratch git repository whose engine
   is a launcher of the reference engine that reads the faults its commit has from a file
   of that commit. The base commit has none; the head commit, a code change only, lists
   NAME. `kl-bitexact run SUITE` runs in a checkout of each (the same suite file and the
   same server command line on both sides, each results.json recording its own commit);
4. `kl-bitexact report` of the head's run against the base's (the comment `publish` would
   post), rendered by GitHub's own Markdown engine (cmark-gfm, from the test extras) with a
   GitHub-like style, and photographed by headless Chromium.

Needs the test extras (`pip install -e '.[test]'`) and Debian's `chromium` and
`fonts-noto-color-emoji` (apt-get install chromium fonts-noto-color-emoji). Timings in the
captured text change from run to run; nothing else should (the scratch repository's
commits are made with fixed names and dates, so their ids are the same each time).

    python scripts/readme_media.py --comment comment.md --png comment.png [--open]

photographs any comment the same way (`--open`: every `<details>` opened) and says which
table scrolls sideways and which cell wraps onto a second line at the comment's width.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from html import unescape
from pathlib import Path

import cmarkgfm
import yaml
from cmarkgfm.cmark import Options

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
IMAGE = ROOT / "docs" / "images" / "pr-comment.png"
STYLE = Path(__file__).with_name("comment.css")
# branch-checkpoint-reuse breaks only the multi-turn check of the radix suite: one red test
# among green ones, the shape of a typical regression (docs/reference-engine.md, Faults).
FAULT = "branch-checkpoint-reuse"
WIDTH = 1000  # about the width of a comment in GitHub's PR timeline, with its margins
TERMINAL_COLUMNS = 100
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # This machine's network is closed: without these, Chromium keeps dialling out.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)
BUNDLED_SUITE = ROOT / "src" / "kl_bitexact" / "suites" / "example.yaml"
# The pull request's engine repository (engine_repository): its files and its commits' author.
SUITE_FILE = "bitexact.yaml"
FAULTS_FILE = "faults.txt"
FAULTS_HEADER = (
    "# The cache bugs this commit's engine has, one a line (names from kl-bitexact's\n"
    "# docs/reference-engine.md, Faults): serve.py starts the server with each.\n"
)
LAUNCHER = '''"""This engine's server: kl-bitexact's reference engine (it speaks sglang's protocol)
with the cache bugs this commit has (faults.txt). The command line kl-bitexact runs is the
same on every commit; what differs is the code it starts."""

import os
import sys
from pathlib import Path

listed = (Path(__file__).parent / "faults.txt").read_text(encoding="utf-8").splitlines()
faults = [line.strip() for line in listed if line.strip() and not line.startswith("#")]
flags = [part for name in faults for part in ("--fault", name)]
server = [sys.executable, "-m", "kl_bitexact", "serve-reference", *sys.argv[1:], *flags]
os.execv(sys.executable, server)
'''
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "kl-bitexact readme_media",
    "GIT_AUTHOR_EMAIL": "readme-media@example.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "kl-bitexact readme_media",
    "GIT_COMMITTER_EMAIL": "readme-media@example.com",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}
BEGIN = "<!-- run-output:begin"
END = "<!-- run-output:end -->"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comment", type=Path, help="photograph this Markdown comment only")
    parser.add_argument("--png", type=Path, help="where --comment's picture goes")
    parser.add_argument("--open", action="store_true", help="open every <details> first")
    parser.add_argument("--width", type=int, default=WIDTH, help="page width in px")
    parser.add_argument("--mermaid", type=Path, help="mermaid.min.js: draw the charts")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("readme_media: needs chromium (apt-get install chromium)", file=sys.stderr)
        return 2
    if args.comment is not None:
        if args.png is None:
            parser.error("--comment needs --png")
        with tempfile.TemporaryDirectory(prefix="kl-bitexact-media-") as scratch:
            markdown = args.comment.read_text(encoding="utf-8")
            layout = screenshot(
                chromium,
                markdown,
                Path(scratch),
                args.png,
                opened=args.open,
                width=args.width,
                mermaid=args.mermaid,
            )
        for problem in layout.problems():
            print(f"readme_media: {problem}", file=sys.stderr)
        print(f"readme_media: wrote {args.png} ({layout.height} px high)")
        return 1 if layout.problems() else 0
    with tempfile.TemporaryDirectory(prefix="kl-bitexact-media-") as scratch:
        work = Path(scratch)
        # Each run in a directory of its own, with the default --out: the text shown is
        # exactly what the command shown prints.
        (work / "base").mkdir()
        (work / "head").mkdir()
        healthy = kl_bitexact(work / "base", ["run"], expect=0)
        broken = kl_bitexact(work / "head", ["run", "--fault", FAULT], expect=1)
        write_readme_block(healthy, broken)
        screenshot(chromium, pull_request_comment(work / "pull-request"), work)
    print(f"readme_media: wrote {README.relative_to(ROOT)} and {IMAGE.relative_to(ROOT)}")
    return 0


def pull_request_comment(root: Path) -> str:
    """The comment on a pull request whose head commit puts FAULT into the engine's code:
    the suite file run in a checkout of each commit, then the head's run reported against
    the base's, as the reusable workflow does."""
    base, head = engine_repository(root)
    kl_bitexact(base, ["run", SUITE_FILE], expect=0)
    kl_bitexact(head, ["run", SUITE_FILE], expect=1)
    results = "kl-bitexact-results/results.json"
    comment = root / "comment.md"
    report = ["report", f"head/{results}", "--baseline", f"base/{results}"]
    kl_bitexact(root, [*report, "--out", comment.name], expect=1)
    return comment.read_text(encoding="utf-8")


def engine_repository(root: Path) -> tuple[Path, Path]:
    """Checkouts of the engine's base commit (on main) and of the pull request's head (a
    branch that adds FAULT to faults.txt, nothing else): `root/base` and `root/head`."""
    base, head = root / "base", root / "head"
    base.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main", base.name)
    (base / "serve.py").write_text(LAUNCHER, encoding="utf-8")
    (base / FAULTS_FILE).write_text(FAULTS_HEADER, encoding="utf-8")
    (base / SUITE_FILE).write_text(suite_file(), encoding="utf-8")
    git(base, "add", "serve.py", FAULTS_FILE, SUITE_FILE)
    git(base, "commit", "-q", "-m", "engine: radix, hierarchical and speculative caches")
    git(root, "clone", "-q", base.name, head.name)
    git(head, "checkout", "-q", "-b", "resume-from-sibling-checkpoint")
    (head / FAULTS_FILE).write_text(f"{FAULTS_HEADER}{FAULT}\n", encoding="utf-8")
    git(head, "commit", "-q", "-a", "-m", f"radix cache: {FAULT} (the bug the suite catches)")
    return base, head


def suite_file() -> str:
    """The bundled suites, each server launched by the repository's own `serve.py` (the
    reference engine speaks sglang's protocol) with the bundled suite's arguments."""
    suites = yaml.safe_load(BUNDLED_SUITE.read_text(encoding="utf-8"))
    for suite in suites:
        server = suite["server"]
        if server.pop("engine") != "reference":
            sys.exit(f"readme_media: {BUNDLED_SUITE}: expected engine: reference servers")
        command = ["python3", "serve.py", "--port", "{port}", *server.pop("args", [])]
        suite["server"] = {"engine": "sglang", "command": command, **server}
    header = "# The engine's bit-exact suites (written by kl-bitexact's scripts/readme_media.py)\n"
    return header + yaml.safe_dump(suites, sort_keys=False, width=100)


def git(cwd: Path, *argv: str) -> None:
    """git with this script's identity and clock, and no user's configuration: the same
    files give the same commit ids on every machine and every day."""
    # GIT_CONFIG_GLOBAL names no file: git reads no ~/.gitconfig (no hooks, no signing).
    env = {**os.environ, **GIT_IDENTITY, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": ""}
    done = subprocess.run(
        ["git", *argv], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"readme_media: git {' '.join(argv)} exited {done.returncode}\n{done.stderr}")


def kl_bitexact(cwd: Path, argv: list[str], *, expect: int) -> str:
    """Run `kl-bitexact ARGV` as a user would (no GitHub in the environment), return stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    # Laid out for a 100-column terminal, as a reader's would be (no colour: not a terminal).
    env["COLUMNS"] = str(TERMINAL_COLUMNS)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    # The engine repository's `python3`: this interpreter (its environment has the packages).
    env["PATH"] = os.pathsep.join(filter(None, [str(Path(sys.executable).parent), env.get("PATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != expect:
        sys.exit(
            f"readme_media: kl-bitexact {' '.join(argv)} exited {done.returncode}, "
            f"expected {expect}\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def write_readme_block(healthy: str, broken: str) -> None:
    block = "\n".join(
        [
            f"{BEGIN} (written by scripts/readme_media.py; edit the script, not this block) -->",
            "What `kl-bitexact run` prints (captured; the timings vary):",
            "",
            "```console",
            "$ kl-bitexact run",
            healthy.rstrip(),
            "```",
            "",
            "The same suite with a cache bug injected into the reference engine (a multi-turn",
            "request resumes from a checkpoint taken down a sibling branch; `--fault` names",
            "one of the bugs in [docs/reference-engine.md](docs/reference-engine.md#faults));",
            "the run exits 1:",
            "",
            "```console",
            f"$ kl-bitexact run --fault {FAULT}",
            broken.rstrip(),
            "```",
            END,
        ]
    )
    text = README.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), flags=re.DOTALL)
    if not pattern.search(text):
        sys.exit(f"readme_media: README.md has no {BEGIN} ... {END} block")
    README.write_text(pattern.sub(lambda _: block, text, count=1), encoding="utf-8")


class Layout:
    """What the first pass measured: the page's height, tables wider than their box (a
    reader scrolls them sideways) and table cells whose text takes more than one line."""

    def __init__(self, measured: dict[str, object]) -> None:
        self.height = int(measured.get("height", 1200))  # type: ignore[call-overload]
        self.wide = list(measured.get("wide", []))  # type: ignore[call-overload]
        self.wrapped = list(measured.get("wrapped", []))  # type: ignore[call-overload]

    def problems(self) -> list[str]:
        found = [f"table or block {index} scrolls sideways" for index in self.wide]
        return found + [f"cell wraps: {text!r}" for text in self.wrapped]


# The first pass only measures: this script puts its findings in the title (as JSON),
# which --dump-dom prints; the second pass takes the picture at exactly that height.
MEASURE = """<script>
const lines = (cell) => {  // lines of text in a cell: the tops of its text's boxes, 6 px apart
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  const tops = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const range = document.createRange(); range.selectNodeContents(node);
    for (const rect of range.getClientRects()) if (rect.width > 0) tops.push(rect.top);
  }
  tops.sort((a, b) => a - b);
  return tops.filter((top, i) => i === 0 || top - tops[i - 1] > 6).length;
};
// GitHub draws a mermaid block as a chart, not as the text a picture without its JS shows.
const mermaid = (node) => /mermaid/.test(node.outerHTML.slice(0, 80));
const tables = Array.from(document.querySelectorAll("table, pre")).filter((n) => !mermaid(n));
document.title = JSON.stringify({
  height: document.documentElement.scrollHeight,
  wide: tables.map((t, i) => (t.scrollWidth > t.clientWidth + 1 ? i : -1)).filter((i) => i >= 0),
  wrapped: Array.from(document.querySelectorAll("td, th"))
    .filter((cell) => cell.offsetParent !== null && lines(cell) > 1)
    .map((cell) => cell.textContent),
});
</script>"""
OPEN = "<script>document.querySelectorAll('details').forEach((d) => { d.open = true; });</script>"


def screenshot(
    chromium: str,
    markdown: str,
    work: Path,
    image: Path = IMAGE,
    *,
    opened: bool = False,
    width: int = WIDTH,
    mermaid: Path | None = None,
) -> Layout:
    """The comment as GitHub renders it, photographed at its full height. `mermaid`: a
    mermaid.min.js (npm's `mermaid` package) that draws the charts as GitHub does."""
    body = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    page = work / "comment.html"
    style = STYLE.read_text(encoding="utf-8")
    opening = (OPEN if opened else "") + (_charts(mermaid) if mermaid else "")
    page.write_text(html(style, body, opening + MEASURE), encoding="utf-8")
    # Time for the charts' script: chromium's virtual clock runs it before the dump.
    wait = ["--virtual-time-budget=10000"] if mermaid else []
    dom = run_chromium(chromium, work, ["--dump-dom", f"--window-size={width},600", *wait], page)
    found = re.search(r"<title>(.*?)</title>", dom, flags=re.DOTALL)
    layout = Layout(json.loads(unescape(found[1])) if found else {})
    page.write_text(html(style, body, opening), encoding="utf-8")
    image.parent.mkdir(parents=True, exist_ok=True)
    shot = [f"--screenshot={image}", f"--window-size={width},{layout.height}", *wait]
    run_chromium(chromium, work, shot, page)
    return layout


def _charts(script: Path) -> str:
    """GitHub draws a `mermaid` code block as a chart: so does this page, with mermaid's own
    script, before the layout is measured."""
    return (
        f'<script src="{script.resolve().as_uri()}"></script><script>'
        "document.querySelectorAll('pre[lang=mermaid]').forEach((pre) => {"
        "const div = document.createElement('div'); div.className = 'mermaid';"
        "div.textContent = pre.textContent; pre.replaceWith(div); });"
        "mermaid.initialize({startOnLoad: false}); mermaid.run();</script>"
    )


def html(style: str, body: str, script: str) -> str:
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>comment</title>'
        f"<style>{style}</style></head><body><div class='comment'>"
        "<div class='header'><b>github-actions</b> <span>bot</span> commented</div>"
        f"<div class='markdown-body'>{body}</div></div>{script}</body></html>"
    )


def run_chromium(chromium: str, work: Path, extra: list[str], page: Path) -> str:
    profile = Path(tempfile.mkdtemp(prefix="profile-", dir=work))  # a new empty profile
    done = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"readme_media: chromium exited {done.returncode}\n{done.stderr[-2000:]}")
    return done.stdout


if __name__ == "__main__":
    sys.exit(main())
