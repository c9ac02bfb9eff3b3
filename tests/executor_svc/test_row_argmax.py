"""row_argmax is torch.argmax(dim=-1), ties and NaN included, for every width and chunk layout."""

from __future__ import annotations

import pytest
import torch

from executor_svc.row_argmax import row_argmax

WIDTHS = [1, 7, 400, 16 * 64, 16 * 64 + 1, 49152, 49152 + 37, 151936]


def check(values: torch.Tensor, chunk: int = 64) -> None:
    """Row-major values, and the same values laid out column-major (as the weight-stationary LM
    head returns them) and as a slice of a padded column-major product."""
    expected = values.argmax(dim=-1)
    column_major = values.t().contiguous().t()
    padded = torch.cat([values, values[:1]]).t().contiguous()[:, : values.shape[0]].t()
    for layout in (values, column_major, padded):
        torch.testing.assert_close(layout, values, rtol=0, atol=0, equal_nan=True)
        got = row_argmax(layout, chunk=chunk)
        assert torch.equal(got, expected), (got, expected, layout.stride())


@pytest.mark.parametrize("width", WIDTHS)
def test_random_rows(width):
    generator = torch.Generator().manual_seed(width)
    check(torch.randn(9, width, generator=generator))
    check(torch.randn(9, width, generator=generator), chunk=1024)


@pytest.mark.parametrize("width", [16 * 64, 16 * 64 + 5, 3000])
def test_ties_give_the_first_maximum(width):
    generator = torch.Generator().manual_seed(1)
    values = torch.randint(0, 4, (64, width), generator=generator).float()  # many ties
    values[1] = 7.0  # a whole row equal
    values[2, -1] = 9.0  # the maximum in the narrower tail chunk
    values[3, [70, 700, width - 1]] = 9.0  # equal maxima in different chunks, tail included
    values[4, [130, 131]] = 9.0  # equal maxima side by side in one chunk
    values[5, [width - 2, width - 1]] = 9.0  # equal maxima side by side in the tail
    check(values)


def test_nan_and_infinities_match_torch():
    values = torch.randn(6, 3000)
    values[0, 2000] = float("nan")
    values[1, [10, 2999]] = float("nan")
    values[2] = float("-inf")
    values[3, 1500] = float("inf")
    values[4, [5, 2500]] = float("inf")
    values[5, 2999] = float("nan")
    check(values)


def test_strided_rows_and_no_rows():
    check(torch.randn(50, 3000)[::3])
    check(torch.randn(3000, 50).t()[::3])  # neither layout: falls back to torch.argmax
    check(torch.randn(3000, 2).t())  # few column-major rows: torch.argmax
    check(torch.empty(0, 3000))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="2-D"):
        row_argmax(torch.randn(3000))
    with pytest.raises(ValueError, match="chunk"):
        row_argmax(torch.randn(2, 3000), chunk=100)
