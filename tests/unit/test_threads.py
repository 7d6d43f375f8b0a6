"""base.threads.at_once: one thread per job, every result and every error, in the jobs' order."""

import threading

import pytest

from niclab.base.threads import at_once


def test_the_jobs_run_at_once_and_each_result_and_error_is_kept_in_the_jobs_order():
    meet = threading.Barrier(3, timeout=5)  # none returns before all three run: they run at once

    def job(value):
        def run():
            meet.wait()
            if isinstance(value, BaseException):
                raise value
            return value

        return run

    failure, interrupt = ValueError("c failed"), KeyboardInterrupt()
    results, errors = at_once({"c": job(failure), "a": job(1), "b": job(interrupt)})
    assert results == {"a": 1}
    assert list(errors) == ["c", "b"] and errors["c"] is failure and errors["b"] is interrupt


def test_no_job_is_no_thread():
    assert at_once({}) == ({}, {})


@pytest.mark.parametrize("count", [1, 16])
def test_every_job_runs_once(count):
    seen = []
    results, errors = at_once({str(i): (lambda i=i: seen.append(i) or i) for i in range(count)})
    assert sorted(seen) == list(range(count)) and list(results.values()) == list(range(count)) and not errors
