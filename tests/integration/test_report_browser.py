"""The report opens in a real browser: headless Chromium (Debian's, driven by Playwright) loads
it with no console error, every plot decodes, every section is there, and a screenshot is taken; and each
recorded run's report, at 1280 px, fits the page, gives every plot an alt text and opens with its answers.

Chromium comes with `make test` (scripts/setup-host --test). The report is
built from the real runs captured in tests/data/runs/.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from niclab.ui.report.page import report_runs

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launched(playwright, chromium: str, tmp_path: Path):
    """Debian's chromium, headless, 1280 px wide. A persistent context is how Playwright takes a fresh
    --user-data-dir of our choosing."""
    return playwright.chromium.launch_persistent_context(
        tmp_path / "profile",
        executable_path=chromium,
        args=CHROMIUM_ARGS,
        headless=True,
        viewport={"width": 1280, "height": 1000},
    )


def test_report_renders_in_headless_chromium(tmp_path):
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is not installed: `make test` installs it (scripts/setup-host --test)"
    report = report_runs(
        [RUNS / name for name in ("nic-shootout", "mtu-sweep", "bonding", "nfs")],
        tmp_path / "report.html",
        prices={"virtio": 0.01},
    )
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = launched(playwright, chromium, tmp_path)
        try:
            page = browser.new_page()
            page.on(
                "console",
                lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None,
            )
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url[:80]}"))
            page.goto(report.as_uri(), wait_until="load")
            images = page.eval_on_selector_all("img", "all => all.map(i => [i.alt, i.complete, i.naturalWidth])")
            headings = page.locator("h2, h3").all_inner_texts()
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert (tmp_path / "profile").is_dir(), "Chromium did not use the fresh profile directory"
    assert problems == []
    assert len(images) >= 12
    assert all(complete and width > 300 for _, complete, width in images), [i for i in images if not i[2]]
    for heading in (
        "Findings",
        "Summary",
        "NetPIPE curves",
        "Throughput, latency and CPU",
        "Throughput against MTU",
        "Bonding",
        "Fio over NFS",
        "Cost per Mbit/s",
        "Provenance",
    ):
        assert heading in headings, f"no section {heading!r} in {headings}"
    screenshot = (tmp_path / "report.png").read_bytes()
    assert screenshot[:8] == b"\x89PNG\r\n\x1a\n" and len(screenshot) > 100_000


WIDER_THAN_THE_PAGE = """() => {
  const width = document.documentElement.clientWidth;
  const scrolled = e => {
    for (let p = e.parentElement; p; p = p.parentElement) {
      if (["auto", "scroll"].includes(getComputedStyle(p).overflowX)) return true;
    }
    return false;
  };
  return [...document.body.querySelectorAll("*")]
    .filter(e => e.getBoundingClientRect().right > width + 0.5 && !scrolled(e))
    .map(e => `${e.tagName.toLowerCase()}.${e.className} ${Math.round(e.getBoundingClientRect().right)} px`)
    .slice(0, 5);
}"""
FIRST_AFTER_THE_TITLE = """() => {
  const header = document.querySelector("h1").parentElement;
  return [header.children.length, header.nextElementSibling && header.nextElementSibling.id];
}"""


def test_each_recorded_runs_report_fits_1280_px_has_alt_texts_and_opens_with_its_answers(tmp_path):
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is not installed: `make test` installs it (scripts/setup-host --test)"
    reports = {
        name: report_runs([RUNS / name], tmp_path / f"{name}.html")
        for name in ("nic-shootout", "mtu-sweep", "bonding", "nfs")
    }
    reports["before-and-after"] = report_runs([RUNS / "nic-shootout"] * 2, tmp_path / "before-and-after.html")
    found: dict[str, tuple] = {}
    with sync_playwright() as playwright:
        browser = launched(playwright, chromium, tmp_path)
        try:
            page = browser.new_page()
            for name, report in reports.items():
                page.goto(report.as_uri(), wait_until="load")
                found[name] = (
                    page.evaluate(WIDER_THAN_THE_PAGE),
                    page.eval_on_selector_all("img", "all => all.map(i => i.alt.trim().length > 0)"),
                    page.evaluate(FIRST_AFTER_THE_TITLE),
                    page.locator("#answers").inner_text()[:400],
                )
                page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        finally:
            browser.close()
    for name, (wider, alts, first, answers) in found.items():
        assert wider == [], f"{name}: wider than the 1280 px page: {wider}"
        assert alts and all(alts), f"{name}: a plot without alt text"
        assert first == [1, "answers"], f"{name}: the title is not followed by the answers: {first}"
        assert answers.startswith(("Emulated: these figures describe", "nic-shootout")), f"{name}: {answers[:100]}"
