import struct
import sys
from pathlib import Path

import pytest

from niclab.plumbing.image.elf import build_id, is_elf, read_dynamic, section
from tests.unit.kmodfake import fake_module


def test_reads_interpreter_and_needed_libraries_of_a_real_program():
    data = Path(sys.executable).resolve().read_bytes()
    assert is_elf(data)
    dynamic = read_dynamic(data)
    assert dynamic.interpreter and dynamic.interpreter.endswith("ld-linux-x86-64.so.2")
    assert "libc.so.6" in dynamic.needed


def test_rejects_non_elf():
    with pytest.raises(ValueError):
        read_dynamic(b"#!/bin/sh\necho hi\n")


def test_a_cut_or_lying_module_is_a_value_error_not_a_struct_error():
    whole = fake_module("e1000")
    assert section(whole, ".modinfo").startswith(b"name=e1000\0")
    for bad in (
        whole[:40],  # the ELF header cut short
        whole[: len(whole) - 70],  # the section headers cut short
        whole[:0x3C] + struct.pack("<H", 900) + whole[0x3E:],  # 900 sections: past the end
        whole[:0x28] + struct.pack("<Q", 1 << 40) + whole[0x30:],  # the headers far past the end
        b"\x7fELF",
    ):
        with pytest.raises(ValueError):
            section(bad, ".modinfo")
        with pytest.raises(ValueError):
            build_id(bad)
    no_sections = (
        b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, 0, 0, 64, 0, 0, 64, 0, 0)
    )
    assert build_id(no_sections) == ""
