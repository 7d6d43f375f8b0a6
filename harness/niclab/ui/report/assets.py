"""Where the report's and the comparison's page templates live (without importing what draws figures)."""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).with_name("templates")
