"""comment.md: a PR that puts mentions, references, links, images, HTML and a stray code fence into its
test ids, failure messages and file names gets a comment in which none of them is active, checked on
the Markdown text itself (markdown-it, with GitHub's autolinks), and the comment is what a CI step
summary shows."""
import re

import pytest

from kvtasks.report import comment
from tests.kernel_repos import KERNEL_TAIL_BUG, make_patch

markdown_it = pytest.importorskip("markdown_it")

HOSTILE = "@someone #1 GH-2 [x](https://evil.example/a) ![i](https://evil.example/i.png) www.evil.example " \
          "<script>alert(1)</script> <img src=x onerror=alert(1)> mail@evil.example ```"
HOSTILE_TESTS = f'''import numpy as np
import pytest

from kernels.scale import scale_rows


@pytest.mark.parametrize("M,N", [pytest.param(4, 16), pytest.param(3, 13, id={HOSTILE!r})])
def test_scale(M, N):
    x = np.arange(M * N, dtype=np.float32).reshape(M, N)
    assert np.allclose(scale_rows(x, 2.0), x * 2.0), {HOSTILE + chr(10) + "```" + chr(10) + "@maintainers"!r}
'''
OUR_HTML = re.compile(r"</?details>|<summary>[\w .,():-]*</summary>")
# what GitHub still turns into a mention, reference or autolink in rendered text (HTML comes out as
# html tokens, checked apart: in a text token "<script>" is shown, never run)
ACTIVE_TEXT = [re.compile(r"(?<!\w)@\w"), re.compile(r"#\d"), re.compile(r"(?i)gh-\d"), re.compile(r"(?i)https?://"),
               re.compile(r"(?i)www\.")]


def tokens(text: str):
    parser = markdown_it.MarkdownIt("commonmark", {"linkify": True}).enable(["linkify", "table"])

    def walk(found):
        for token in found:
            yield token
            yield from walk(token.children or [])
    return list(walk(parser.parse(text)))


def test_nothing_a_pr_supplies_is_active_in_its_comment(repo, validate, tmp_path, monkeypatch):
    step_summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG, "tests/test_scale.py": HOSTILE_TESTS,
                              f"docs/{HOSTILE.replace('/', '_')}.md": HOSTILE + "\n"}, tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_scale.py", "--head-sha", "e" * 40)
    text = (result.out.parent / comment.COMMENT).read_text()
    assert result.verdict == "BLOCK" and "evil" in text and "someone" in text  # the PR's strings are there, inert
    # the verdict and what decided it come first, then the blockers before any note
    assert text.startswith("## kvtasks: **BLOCK**")
    assert text.splitlines()[2].startswith("**Decided by:** 2 blocker rules: `target.regression`")
    assert text.index("### Blockers") < text.index("### Notes")
    assert "**Target:** `tests/test_scale.py`" in text
    # the failing assertion's line, as pytest's E line says it, copies out whole: nothing invisible was
    # put into it
    assert not re.search("[\u200b-\u200f\u2060\ufeff]", text)
    assert "AssertionError: @someone #1 GH-2 [x](https://evil.example/a)" in text
    parsed = tokens(text)
    assert [t.type for t in parsed if t.type in ("link_open", "image", "html_inline")] == []
    assert [t.content for t in parsed if t.type == "html_block" and OUR_HTML.sub("", t.content).strip()] == []
    for token in parsed:
        if token.type == "text":
            assert not [pattern.pattern for pattern in ACTIVE_TEXT if pattern.search(token.content)], token.content
    # every code block is one the comment opened (logs in <details>), closed where it meant to
    fences = [t for t in parsed if t.type in ("fence", "code_block")]
    assert fences and all(t.type == "fence" and t.info == "text" for t in fences)
    assert len(fences) == text.count("<details><summary>") - 1  # every <details> but the stage table holds one
    assert len([t for t in parsed if t.type == "heading_open"]) == len(re.findall(r"(?m)^#{2,3} ", text))
    assert step_summary.read_text().startswith(text)


def test_the_page_link_is_the_only_link_and_only_when_a_prefix_is_given(monkeypatch):
    report = {"label": "pr-1", "verdict": "PASS", "repo": {"base": "a" * 40}, "findings": [], "stages": {}}
    assert [t for t in tokens(comment.markdown(report, [])) if t.type == "link_open"] == []
    monkeypatch.setenv(comment.REPORT_URL_VARIABLE, "https://ci.example/reports/")
    linked = [t.attrs["href"] for t in tokens(comment.markdown(report, [], comment.page_url("pr-1")))
              if t.type == "link_open"]
    assert linked == ["https://ci.example/reports/pr-1/index.html"]


@pytest.mark.parametrize("text", ["```", "````\n```", "~~~\n```python\n"])
def test_a_long_text_cannot_close_its_own_block(text):
    parsed = tokens(comment.block(text + "\nafter"))
    assert [t.type for t in parsed] == ["fence"] and parsed[0].content.endswith("after\n")


def test_the_missing_gpu_is_one_line_with_its_notes_folded():
    notes = [{"rule": "gpu.not-claimed", "severity": "note", "stage": "gpu_claim", "detail": "no GPU was claimed"},
             {"rule": "gpu.ran-without-gpu", "severity": "note", "stage": "gpu_claim", "detail": "ran without a GPU"},
             {"rule": "perf.not-compared", "severity": "note", "stage": "perf",
              "detail": "no perf comparison was made: no GPU was claimed: timings would not describe the kernel"},
             {"rule": "selection.provenance", "severity": "note", "stage": "selection", "detail": "pre-existing"}]
    report = {"label": "pr-1", "verdict": "INCONCLUSIVE", "degraded_mode": "NO_GPU", "repo": {"base": "a" * 40},
              "findings": notes, "stages": {}}
    text = comment.markdown(report, [])
    listed = [line for line in text.splitlines() if line.startswith("- ")]
    assert listed == ["- no GPU was claimed, so PASS is out of reach and nothing was timed (`gpu.not-claimed`, "
                      "`gpu.ran-without-gpu`, `perf.not-compared`; in full below)",
                      "- `selection.provenance` (selection): `pre-existing`"]
    assert "<details><summary>No GPU</summary>" in text and "timings would not describe the kernel" in text
    # with a GPU claimed, a note is a note
    claimed = comment.markdown({**report, "degraded_mode": None}, [])
    assert "- `gpu.ran-without-gpu` (gpu_claim): `ran without a GPU`" in claimed
