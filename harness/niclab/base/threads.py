"""Jobs run at once, a thread each (one per node, most often), and what each returned or raised."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")


def at_once(jobs: Mapping[str, Callable[[], T]]) -> tuple[dict[str, T], dict[str, BaseException]]:
    """Run every job in a thread of its own and wait for all of them: what each returned, and what each
    raised (a KeyboardInterrupt too: the caller decides which to raise). Both in the jobs' order."""
    results: dict[str, T] = {}
    errors: dict[str, BaseException] = {}

    def run(key: str, job: Callable[[], T]) -> None:
        try:
            results[key] = job()
        except BaseException as exc:
            errors[key] = exc

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in jobs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {k: results[k] for k in jobs if k in results}, {k: errors[k] for k in jobs if k in errors}
