import sys
from pathlib import Path

import pytest

from niclab.plumbing.image.elf import is_elf, read_dynamic


def test_reads_interpreter_and_needed_libraries_of_a_real_program():
    data = Path(sys.executable).resolve().read_bytes()
    assert is_elf(data)
    dynamic = read_dynamic(data)
    assert dynamic.interpreter and dynamic.interpreter.endswith("ld-linux-x86-64.so.2")
    assert "libc.so.6" in dynamic.needed


def test_rejects_non_elf():
    with pytest.raises(ValueError):
        read_dynamic(b"#!/bin/sh\necho hi\n")
