"""The HTML report: self-contained, escaped, and rendered without errors by headless Chromium."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from zym.analysis.export.html_report import flame_tree, render_report, write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--enable-logging=stderr", "--v=0"]


@pytest.fixture(scope="module")
def report_html(export_source, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    write_report(export_source, out)
    return out


def test_self_contained(report_html):
    html = report_html.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # no remote resources
    assert "@import" not in html and "url(" not in html
    assert "default-src 'none'" in html  # and the page forbids them anyway


def test_sections_and_findings(report_html, export_source):
    html = report_html.read_text()
    for heading in ("Summary", "What to fix first", "GPU-time flamegraph",
                    "Top call paths by GPU time"):
        assert heading in html
    for f in export_source.findings:
        assert f["rule_id"] in html
    assert "gpt_decode_server.py:40 FeedForward.forward" in html


def test_flame_tree_widths_add_up(export_source):
    tree = flame_tree(export_source)
    assert tree["v"] == int(export_source.data.gpu["dur_ns"].sum())

    def check(n):
        assert sum(c["v"] for c in n["c"]) <= n["v"]
        for c in n["c"]:
            check(c)
    check(tree)


def test_trace_text_cannot_inject_markup(export_source):
    import copy
    import dataclasses

    from zym.rules.findings import Findings

    src = copy.copy(export_source)
    evil = "</script><script>alert(1)</script><b>x</b>"
    first = dataclasses.replace(export_source.found[0], title=evil, message=evil, site=evil,
                                source=evil, saving_how=evil)
    src.found = Findings([first])
    html = render_report(src)
    assert evil not in html and "&lt;/script&gt;" in html


def test_the_page_ranks_and_counts_findings_as_the_cli_does(report_html, sample_capture):
    """Same findings, same order, same numbers as `zym analyze -f json` (one report dict)."""
    import json
    import re
    from html import escape

    from typer.testing import CliRunner
    from zym.cli.main import app

    cli = json.loads(CliRunner().invoke(app, ["analyze", str(sample_capture), "-f", "json"]).stdout)
    html = report_html.read_text()
    rules_in_page = re.findall(r'<code class="rule">([^<]+)</code>', html)
    assert rules_in_page == [f["rule_id"] for f in cli["findings"]]
    for i, f in enumerate(cli["findings"], 1):
        assert escape(f["message"]) in html and f"<b>{i}.</b> at" in html


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (scripts/setup-browser.sh "
                                             "installs Debian's chromium)")
def test_renders_in_headless_chromium_without_console_errors(report_html, tmp_path):
    url = report_html.resolve().as_uri()
    dom = subprocess.run([CHROMIUM, *FLAGS, "--dump-dom", url], capture_output=True, text=True,
                         timeout=120, check=True)
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console
    frames = dom.stdout.count('class="fr')
    assert frames > 50, "the flamegraph script drew its frames"
    assert dom.stdout.count('<article class="finding') >= 5
    shot = tmp_path / "report.png"
    run = subprocess.run([CHROMIUM, *FLAGS, "--window-size=1400,4200", f"--screenshot={shot}",
                          url], capture_output=True, text=True, timeout=120, check=True)
    assert not [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 100_000
    keep = shutil.copy(shot, report_html.parent / "report.png")  # for people to look at
    print(f"screenshot: {keep}")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (scripts/setup-browser.sh "
                                             "installs Debian's chromium)")
def test_flamegraph_search_and_zoom_in_chromium(report_html, tmp_path):
    """Type in the search box and click a frame, as a user would: the status line reports the
    matching share of GPU time and the zoomed frame, with no script error."""
    poke = ('<script>var s=document.getElementById("flame-search");s.value="gemm";'
            's.dispatchEvent(new Event("input"));'
            'document.querySelectorAll("#flame .fr")[5].click();</script></body>')
    page = tmp_path / "interact.html"
    page.write_text(report_html.read_text().replace("</body>", poke))
    dom = subprocess.run([CHROMIUM, *FLAGS, "--dump-dom", page.resolve().as_uri()],
                         capture_output=True, text=True, timeout=120, check=True)
    assert not [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    status = re.search(r'id="flame-status">([^<]*)<', dom.stdout).group(1)
    assert status.startswith("zoomed: ") and "matches: 88.2% of 340.27 ms" in status
    assert dom.stdout.count('class="fr hit"') >= 3


def test_the_report_reads_the_capture_as_the_analysis_does(sample_capture):
    """`zym report` draws no timeline: its capture is read as `zym analyze` reads it (names
    as codes, the columns no analysis reads left out), and the page's data is the same as
    from the capture read whole, with text."""
    import polars as pl
    from zym.analysis.export.html_report import report_data
    from zym.analysis.export.source import load_export_source
    from zym.analysis.load import UNREAD

    narrow = load_export_source(sample_capture, with_spans=False)
    whole = load_export_source(sample_capture)  # (a timeline's read; the page reads no span)
    assert narrow.data.gpu.schema["name"] == pl.Categorical
    assert whole.data.gpu.schema["name"] == pl.String
    assert not set(UNREAD["gpu"]) & set(narrow.data.gpu.columns)
    assert set(UNREAD["gpu"]) <= set(whole.data.gpu.columns)
    got, want = report_data(narrow), report_data(whole)
    got.pop("generated_at"), want.pop("generated_at")
    assert got == want and got["findings"]
