"""The CLI's value types: counts, limits and durations refused with the reason, before anything starts."""

from __future__ import annotations

import argparse

import pytest

from client.cli_values import non_negative_int, positive_float, positive_int


def test_positive_int_takes_one_and_more():
    assert positive_int("1") == 1
    assert positive_int("64") == 64


@pytest.mark.parametrize("text, reason", [("0", "must be >= 1, got 0"), ("-3", "must be >= 1, got -3"),
                                          ("2.5", "must be an integer, got '2.5'"), ("x", "must be an integer")])
def test_positive_int_refuses(text, reason):
    with pytest.raises(argparse.ArgumentTypeError, match=reason):
        positive_int(text)


def test_non_negative_int_takes_zero_but_not_less():
    assert non_negative_int("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="must be >= 0, got -1"):
        non_negative_int("-1")


def test_positive_float_takes_fractions():
    assert positive_float("0.25") == 0.25


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "-inf", "soon"])
def test_positive_float_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError, match="must be"):
        positive_float(text)
