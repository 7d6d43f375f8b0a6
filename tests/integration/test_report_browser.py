"""The report opens in a real browser: headless Chromium (Debian's, driven by Playwright) loads
it with no console error, every plot decodes, every section is there, and a screenshot is taken.

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
        # A persistent context is how Playwright takes a fresh --user-data-dir of our choosing.
        browser = playwright.chromium.launch_persistent_context(
            tmp_path / "profile",
            executable_path=chromium,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 1000},
        )
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
