from __future__ import annotations

import pytest

from cupool.core.units import format_bytes, parse_budget, parse_bytes
from cupool.errors import UnitError


@pytest.mark.parametrize("text,expected", [
    ("123", 123), ("4GiB", 4 * 1024**3), ("1.5 GB", 1_500_000_000), ("512MiB", 512 * 1024**2),
    ("2kib", 2048), ("7b", 7), (64, 64),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "4 GiBs", "-3", "0", "nan", "1e400", "0.1"])
def test_parse_bytes_rejects_with_the_text(text):
    with pytest.raises(UnitError) as info:
        parse_bytes(text, "--budget")
    assert f"(={text!r})" in str(info.value) and "--budget" in str(info.value)


def test_budget_percent_of_reference():
    assert parse_budget("70%", 1000) == 700
    assert parse_budget("4KiB", 1000) == 4096
    for bad in ("-5%", "x%", "0%"):
        with pytest.raises(UnitError):
            parse_budget(bad, 1000)


def test_format_bytes():
    assert format_bytes(12) == "12 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(3 * 1024**3) == "3.00 GiB"
