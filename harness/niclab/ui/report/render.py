"""Render a Report as one self-contained HTML page (jinja2, autoescaped; plots embedded)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from niclab.base.atomic import write_text
from niclab.ui.report.assets import TEMPLATES
from niclab.ui.report.build import Report


def _data_uri(text: str, mime: str) -> str:
    return f"data:{mime};charset=utf-8," + quote(text)


def render_html(report: Report) -> str:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html", "j2"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["data_uri"] = _data_uri
    env.filters["num"] = lambda v: "" if v is None else (f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}")
    return env.get_template("report.html.j2").render(report=report)


def write_report(report: Report, out: Path) -> Path:
    """The page at `out`, whole or not at all, never written through a symlink there (niclab.base.atomic)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_text(out, render_html(report))
