"""The HTML pages beside the reports: what they show, and a real batch's pages in a headless browser."""
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from kvtasks import demo, report
from kvtasks.report import comment, pages
from kvtasks.run import pipeline
from kvtasks.stages import StageResult, cpu_tier, result
from kvtasks.stages.perf.scrape import scrape
from kvtasks.stages.perf.stats import METHOD, compare
from kvtasks.harness.junit import pytest_stats
from tests.kernel_repos import make_patch
from tests.kit import target_run
from tests.processes import PROJECT, doit

# Debian's browser and its driver (.ci/run installs both); selenium's own driver manager is never used
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
HOSTILE_SCRIPT = "<script>window.kvtasksPwned = 1</script>"
HOSTILE_ATTRIBUTE = "<img src=x onerror=window.kvtasksPwned=2>"
REPO = {"worktree": "/w", "base": "b" * 40, "head": "c" * 40, "kind": "unknown", "patch_sha256": "d" * 64}
CELLS = ["64,2000,f32", "4096,192,f32", "7,4097,f16"]
TIER = {"interpreter": "triton", "evidence": cpu_tier.EVIDENCE, "reason": "--cpu-tier triton", "triton": "3.5.0",
        "torch": "2.13.0", "numpy": "2.1.0", "sanitizer": "on"}


def compose(label: str, *stages: StageResult, **facts) -> report.Report:
    run = StageResult(name="run", facts={"repo": REPO, **facts})
    selection = StageResult(name="selection", selection={"target": "tests/test_k.py", "runner": "pytest",
                                                         "runner_reason": "defines collectable tests",
                                                         "grid_cells": CELLS, "grid_channel": "env"})
    return pipeline.compose(label, [run, selection, *stages])


def publish(reports: Path, composed: report.Report, **extra) -> Path:
    """Publish as a validation does (the JSON, summary.md), plus any field a later report version adds."""
    folder = reports / composed.label
    report.publish(composed, [folder / pages.REPORT])
    if extra:
        path = folder / pages.REPORT
        path.write_text(json.dumps({**json.loads(path.read_text()), **extra}))
    pages.write_report_page(folder, composed.required_stages())
    return folder


def section(html: str, title: str) -> str:
    return html.split(f"<h2>{title}</h2>")[1].split("<h2>")[0]


def grid_failing_one_cell() -> StageResult:
    violation = {"kernel": "tiled_k", "op": "store", "argument": "out", "element_offset": 4097,
                 "extent_elements": 4096, "program": [0, 3], "test": "tests/test_k.py::test_k[7-4097-f16]"}
    grid = result("correctness_grid", "fail", "exit 1 on the grid", cells=CELLS, channel="env", exit=1,
                  stats={"executed": 3, "failures": 1, "failed_tests": ["tests.test_k::test_k[7-4097-f16]"]},
                  cpu_tier={"evidence": cpu_tier.EVIDENCE, "violations": [violation]})
    return grid.finding("cpu-tier.out-of-bounds", "blocker", "out-of-bounds memory access on head and not on base")


def measured_perf(ratios=(1.01, 0.97, 0.9)) -> StageResult:
    """Perf evidence as the perf stage composes it: two rounds a side of a markdown table, scraped
    and compared; head/base of row i is ratios[i]."""
    def log(scale):
        lines = ["| M | kernel us |", "| --- | --- |",
                 *(f"| {2 ** (10 + i)} | {10.0 * scale(ratio):.6f} |" for i, ratio in enumerate(ratios))]
        return scrape("\n".join(lines))

    compared = compare([log(lambda r: 1.0), log(lambda r: 1.02)], [log(lambda r: 1 / r), log(lambda r: 1.01 / r)],
                       threshold=0.95, min_rows=3)
    worst = compared.columns[compared.worst_column]
    return result("perf", "pass", compared.reason, rows=compared.rows, threshold=0.95,
                  noise_floor=compared.noise_floor, columns=compared.columns, worst_column=compared.worst_column,
                  median_ratio=compared.headline, interval=list(compared.interval),
                  interval_confidence=worst.interval_confidence, statistics=METHOD)


def test_a_report_page_shows_stages_findings_grid_sanitizer_perf_and_tier(tmp_path):
    changed = {"kernels/k.py": "M", "docs/<b>notes</b>.md": "A"}
    folder = publish(tmp_path, compose(
        "pr-1", result("merge_sim", "pass", "patch applies cleanly", changed_paths=changed),
        result("baseline_control", "pass", "base ran", s1_grid={"state": "ran", "exit": 0, "stats": {"executed": 3}}),
        grid_failing_one_cell(), measured_perf(),
        result("sensitivity", "pass", "the suite failed when the route's output was corrupted"),
        cpu_tier=TIER))
    html = (folder / pages.PAGE).read_text()
    published = json.loads((folder / pages.REPORT).read_text())

    # the stage table is the report's own stage list, stages added after this page was written included
    assert re.findall(r'<tr id="stage-([^"]+)"', html) == list(published["stages"])
    assert "sensitivity" in published["stages"] and "evidence tier</th>" in html
    assert 'class="banner verdict-BLOCK"' in html and "b" * 40 in html and "c" * 40 in html and "d" * 64 in html
    assert "triton-interpreter (CPU): triton 3.5.0, torch 2.13.0" in html
    # each grid cell, on each side: the failing one is named by its test id, the others are not blamed
    grid = section(html, "Independent grid")
    cells = dict(re.findall(r"<tr><td><code>([^<]+)</code></td>\s*(.*?)</tr>", grid, re.S))
    assert set(cells) == set(CELLS)
    assert "failed" in cells["7,4097,f16"] and "tests.test_k::test_k[7-4097-f16]" in cells["7,4097,f16"]
    assert cells["64,2000,f32"].count(">passed<") == 1 and "no failing test names it" in cells["64,2000,f32"]
    # the sanitizer's finding, where it was seen
    sanitizer = section(html, "Bounds sanitizer")
    assert "correctness_grid" in sanitizer and "tiled_k" in sanitizer and "4097" in sanitizer and "4096" in sanitizer
    # perf: a row table and an inline chart with a point per row, the one below threshold marked
    chart = re.search(r"<svg class=\"perf-chart\".*?</svg>", html, re.S).group(0)
    assert chart.count("<circle") == 3 and chart.count('class="below"') == 1 and 'class="threshold"' in chart
    assert "<td>0.900</td>" in html
    # the statistics as issue 20 made them honest: best of n with the round-pair range, no 95% claim per row
    assert "Statistics: per row: best of n rounds per side" in html and "95% interval" not in html
    assert re.search(r"<td>0\.900</td><td>0\.\d+–0\.\d+</td>", html)
    # PR-supplied file names are text
    assert "docs/&lt;b&gt;notes&lt;/b&gt;.md" in html and "<b>notes</b>" not in html
    assert "<script" not in html  # a report page carries no script at all


def test_a_report_page_shows_the_sides_and_what_base_loaded(tmp_path):
    sides = StageResult(name="test_policy", selection={
        "route_side": ["pkg/ops.py"], "test_side": ["pkg/checks.py", "tests/<i>x</i>.py"],
        "sides_basis": "observed: base-repo loaded 3 checkout modules",
        "loaded_files": [{"path": "pkg/ops.py", "during": ""}, {"path": "pkg/_impl.py", "during": "route-import"},
                         {"path": "pkg/checks.py", "during": ""}]})
    html = (publish(tmp_path, compose("pr-sides", sides)) / pages.PAGE).read_text()
    assert re.findall(r"<code>([^<]+)</code>", html.split('id="route-side"')[1].split("</dd>")[0]) == ["pkg/ops.py"]
    test_side = html.split('id="test-side"')[1].split("</dd>")[0]
    assert "pkg/checks.py" in test_side and "tests/&lt;i&gt;x&lt;/i&gt;.py" in test_side and "observed: base-repo" in test_side
    loaded = html.split('id="loaded-files"')[1].split("</dd>")[0]
    assert "3 checkout modules" in loaded and "<code>pkg/_impl.py</code> (route-import)" in loaded


def test_an_inconclusive_page_says_why_and_every_finding_carries_its_rule(tmp_path):
    # runtime_compat never ran, so a required stage is short of pass: INCONCLUSIVE, and the banner says which
    folder = publish(tmp_path, compose("short", result("merge_sim", "pass", "patch applies cleanly"),
                                       result("baseline_control", "pass", "base ran"),
                                       result("test_policy", "pass", "1 file compared").finding(
                                           "policy.tolerance-added", "note", "atol=1e-3 added")))
    html = (folder / pages.PAGE).read_text()
    assert 'class="banner verdict-INCONCLUSIVE"' in html
    decided = html.split('id="decided-by">')[1].split("</p>")[0]
    assert "required stages short of pass:" in decided and "runtime_compat" in decided
    assert "<td><code>policy.tolerance-added</code></td>" in html
    assert "other (neither aiter nor FlyDSL)" in html and "<dd class=\"mono\">unknown</dd>" not in html


def test_the_launches_logs_travel_with_the_report_and_the_comment_and_page_link_them(tmp_path, monkeypatch):
    monkeypatch.setenv(comment.REPORT_URL_VARIABLE, "https://ci.example/reports")
    ran = result("correctness_repo_tests", "fail", "exit 1")
    ran.runs = [target_run(tmp_path / "store", "head-repo", exit=1, failures=1, log="E   AssertionError: tail\n")]
    folder = publish(tmp_path / "reports", compose("pr-logs", ran))
    published = json.loads((folder / pages.REPORT).read_text())
    assert published["logs"] == {"head-repo": "pr-logs/logs/head-repo.log"}
    assert (folder.parent / published["logs"]["head-repo"]).read_text() == "E   AssertionError: tail\n"
    assert "Logs: [`head-repo`](https://ci.example/reports/pr-logs/logs/head-repo.log)" in \
        (folder / comment.COMMENT).read_text()
    assert '<a href="logs/head-repo.log"><code>head-repo</code></a>' in (folder / pages.PAGE).read_text()
    # rebuilt once the store no longer keeps the log, the copy that travelled stays linked; a copy of a
    # launch the report no longer has is not left beside it
    (folder / "logs" / "base-old.log").write_text("an earlier head's run\n")
    (tmp_path / "store" / "head-repo.log").unlink()
    folder = publish(tmp_path / "reports", compose("pr-logs", ran))
    assert json.loads((folder / pages.REPORT).read_text())["logs"] == {"head-repo": "pr-logs/logs/head-repo.log"}
    assert sorted(path.name for path in (folder / "logs").iterdir()) == ["head-repo.log"]


def test_a_report_page_says_what_did_not_run(tmp_path):
    folder = publish(tmp_path, compose("halted", result("merge_sim", "fail", "conflict").finding("merge.patch-does-not-apply", "blocker", "conflict"),
                                       halt="the patch does not apply"))
    html = (folder / pages.PAGE).read_text()
    assert "The sanitizer did not run" in html and "Not measured: not run: the patch does not apply" in html
    assert "none (targets ran on their own runtime" in html


def test_index_columns_sorting_keys_and_per_arch_verdicts_only_when_reported(tmp_path):
    publish(tmp_path, compose("pr-fast", measured_perf((1.2, 1.1, 1.3))))
    publish(tmp_path, compose("pr-slow", grid_failing_one_cell(), measured_perf()))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / pages.REPORT).write_text("{ not json")
    index = pages.write_index(tmp_path).read_text()
    rows = dict(re.findall(r'<tr class="verdict-[A-Z_]+" data-label="([^"]+)">(.*?)</tr>', index, re.S))
    assert list(rows) == ["pr-slow", "pr-fast", "broken"]  # worst verdict first; unreadable last
    slow = rows["pr-slow"]
    assert "0.970" in slow and "1 blocker" in slow and 'href="pr-slow/index.html"' in slow
    assert 'href="pr-slow/validation_report.json"' in slow and "UNREADABLE" in rows["broken"]
    assert "gfx942" not in index

    publish(tmp_path, compose("fleet", measured_perf()),
            arch_runs={"gfx942": {"verdict": "PASS", "node": "n1"}, "gfx90a": {"verdict": "BLOCK", "node": "n2"}})
    index = pages.write_index(tmp_path).read_text()
    assert re.search(r"<th data-sort><button type=\"button\">gfx90a</button></th>\s*<th data-sort><button "
                     r"type=\"button\">gfx942</button></th>", index)
    fleet = re.search(r'data-label="fleet">(.*?)</tr>', index, re.S).group(1)
    assert fleet.index("verdict-BLOCK\">BLOCK") < fleet.index("verdict-PASS\">PASS")
    assert "not run" in re.search(r'data-label="pr-fast">(.*?)</tr>', index, re.S).group(1)
    page = section((tmp_path / "fleet" / pages.PAGE).read_text(), "Per architecture")
    assert "gfx90a" in page and "node: n2" in page and 'verdict-BLOCK">BLOCK' in page


def test_failing_test_ids_are_kept_from_junit(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite name="pytest" tests="3" failures="1" errors="1" skipped="0">'
                     '<testcase classname="tests.test_k" name="test_k[64-2000-f32]"/>'
                     '<testcase classname="tests.test_k" name="test_k[7-4097-f16]"><failure message="m"/></testcase>'
                     '<testcase classname="tests.test_k" name="test_j"><error message="e"/></testcase>'
                     "</testsuite></testsuites>")
    assert pytest_stats(junit, 1).failed_tests == ["tests.test_k::test_k[7-4097-f16]", "tests.test_k::test_j"]


def test_doit_serve_serves_the_pages_on_localhost_only(tmp_path):
    home = tmp_path / "home"
    publish(home / "reports", compose("pr-1", grid_failing_one_cell()))
    errors = tmp_path / "serve.stderr"
    with errors.open("w") as stderr:  # with every thread's stack, should SIGINT not stop it
        # started as a script's background job starts it, with SIGINT ignored: Ctrl-C must still stop it
        server = subprocess.Popen([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), "serve", "port=0"],
                                  cwd=PROJECT, env={**os.environ, "KVTASKS_HOME": str(home), "PYTHONFAULTHANDLER": "1"},
                                  stdout=subprocess.PIPE, stderr=stderr, text=True,
                                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        line = ""
        while "http://" not in line:
            line = server.stdout.readline()
            assert line, "doit serve exited before serving"
        url = re.search(r"http://\S+/", line).group(0)
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "index.html", timeout=10) as index:
            assert 'data-label="pr-1"' in index.read().decode()
        with urllib.request.urlopen(url + "pr-1/index.html", timeout=10) as page:
            assert "BLOCK · pr-1" in page.read().decode()
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            signals = [line for line in Path(f"/proc/{server.pid}/status").read_text().splitlines()
                       if line.startswith("Sig")]
            server.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack, then it dies
            server.wait(timeout=20)
            pytest.fail(f"doit serve did not stop within 20 s of SIGINT ({'; '.join(signals)}):\n"
                        f"{errors.read_text()[-6000:]}")
    assert doit(home, "serve", "port=http").returncode == 64  # a usage error


# -- a real batch in a real browser ----------------------------------------------------------------

@pytest.fixture
def browser(tmp_path):
    if not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()):
        if os.environ.get("CI") == "true":
            pytest.fail("Debian's chromium and chromium-driver are missing: .ci/run installs them")
        pytest.skip("Debian's chromium and chromium-driver are not installed (.ci/run installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()


def demo_batch(home: Path, tmp_path: Path) -> Path:
    """The demo's hidden tail bug (BLOCK) and clean fix (INCONCLUSIVE without a GPU), and a PR that
    comments out shape rows whose text is markup (NEEDS_WORK): the row text reaches the report."""
    repo, heads = demo.materialize(home)
    test = (repo / "tests" / "test_softmax.py").read_text()
    last_row = '    (8, 100, "f16"),\n'
    hostile_rows = f'{last_row}    # (7, 100, "{HOSTILE_SCRIPT}"),\n    # (9, 100, "{HOSTILE_ATTRIBUTE}"),\n'
    hostile = make_patch(repo, {"tests/test_softmax.py": test.replace(last_row, hostile_rows)},
                         tmp_path / "hostile.patch")
    manifest = tmp_path / "nightly.json"
    manifest.write_text(json.dumps({**demo.OPTIONS, "repo": str(repo), "prs": [
        {"label": "demo", "patch": str(demo.patch_path("hidden-tail-bug")), "head_sha": heads["hidden-tail-bug"]},
        {"label": "clean-fix", "patch": str(demo.patch_path("clean-fix")), "head_sha": heads["clean-fix"]},
        {"label": "hostile", "patch": str(hostile)}]}))
    return manifest


def test_a_batch_s_pages_in_a_headless_browser(home, tmp_path, browser):
    done = doit(home, "batch", f"manifest={demo_batch(home, tmp_path)}")
    reports = home / "reports"
    verdicts = {label: json.loads((reports / label / pages.REPORT).read_text())["verdict"]
                for label in ("demo", "clean-fix", "hostile")}
    assert verdicts == {"demo": "BLOCK", "clean-fix": "INCONCLUSIVE", "hostile": "NEEDS_WORK"}, done.stdout
    assert done.returncode == 1

    for index in (reports / "index.html", reports / "nightly" / "batch.html"):
        browser.get(index.as_uri())
        rows = {row.get_attribute("data-label"): row
                for row in browser.find_elements(By.CSS_SELECTOR, "table.reports tbody tr")}
        assert {label: row.find_element(By.CSS_SELECTOR, "td.verdict").text for label, row in rows.items()} == verdicts
        # unticking a verdict hides exactly its rows; ticking it again brings them back
        browser.find_element(By.CSS_SELECTOR, "label[for=show-BLOCK]").click()
        assert {label: row.is_displayed() for label, row in rows.items()} == \
            {"demo": False, "clean-fix": True, "hostile": True}
        browser.find_element(By.CSS_SELECTOR, "label[for=show-BLOCK]").click()
        assert all(row.is_displayed() for row in rows.values())
        # sorting by a column reorders the rows, and a second click reverses them
        for order in (["clean-fix", "demo", "hostile"], ["hostile", "demo", "clean-fix"]):
            browser.find_element(By.XPATH, "//th/button[text()='PR']").click()
            assert [row.get_attribute("data-label")
                    for row in browser.find_elements(By.CSS_SELECTOR, "table.reports tbody tr")] == order

    # a link reaches the PR's page
    browser.find_element(By.CSS_SELECTOR, "tr[data-label=demo] a.page").click()
    assert browser.current_url == (reports / "demo" / "index.html").as_uri()
    assert browser.find_element(By.ID, "verdict").text.startswith("BLOCK · demo")
    grid = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, "table.grid tbody tr")]
    failed_cells = [cell for cell, base, head in grid if head.startswith("failed") and base == "passed"]
    assert failed_cells == ["64,2000,f32", "7,4097,f16"]
    browser.set_window_size(1280, browser.execute_script("return document.documentElement.scrollHeight") + 140)
    screenshot = reports / "demo" / "screenshot.png"
    assert browser.save_screenshot(str(screenshot))
    print(f"screenshot of the demo's BLOCK page: {screenshot}")

    # a PR-supplied string holding markup is shown as text and never runs
    browser.get((reports / "hostile" / "index.html").as_uri())
    body = browser.find_element(By.TAG_NAME, "body").text
    assert HOSTILE_SCRIPT in body and HOSTILE_ATTRIBUTE in body
    assert browser.execute_script("return window.kvtasksPwned === undefined")
    assert not browser.find_elements(By.CSS_SELECTOR, "img")
