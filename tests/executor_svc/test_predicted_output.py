"""Drafts from a predicted output: where the output stands in the prediction, and what follows it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from executor_svc.drafters.prediction import PredictedOutput

PREDICTION = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]


def test_before_any_output_the_prediction_starts_the_drafts():
    assert PredictedOutput(PREDICTION).propose([], 3) == [10, 11, 12]


def test_an_output_following_the_prediction_gets_what_comes_next():
    predicted = PredictedOutput(PREDICTION)
    assert predicted.propose([10], 3) == [11, 12, 13]
    assert predicted.propose([10, 11], 3) == [12, 13, 14]
    assert predicted.propose([10, 11, 12, 13, 14, 15], 5) == [16, 17, 18, 19]
    assert predicted.propose(PREDICTION, 3) == []


def test_an_edit_stops_the_drafts_until_two_output_tokens_rejoin_the_prediction():
    predicted = PredictedOutput(PREDICTION)
    assert predicted.propose([10, 11, 12, 99], 3) == []
    assert predicted.propose([10, 11, 12, 99, 98], 3) == []
    assert predicted.propose([10, 11, 12, 99, 98, 15], 3) == []  # one token is never enough
    assert predicted.propose([10, 11, 12, 99, 98, 15, 16], 3) == [17, 18, 19]  # a deletion: 13 and 14 skipped
    assert predicted.propose([10, 11, 12, 99, 98, 15, 16, 17, 18], 3) == [19]  # and it follows again


def test_an_output_that_does_not_start_with_the_prediction_joins_it_later():
    predicted = PredictedOutput(PREDICTION)
    assert predicted.propose([50], 3) == []
    assert predicted.propose([50, 51, 13, 14], 2) == [15, 16]


def test_a_repeated_stretch_is_continued_where_the_output_stands():
    line = [7, 8, 9]
    predicted = PredictedOutput(line + [1] + line + [2] + line + [3])
    assert predicted.propose([7, 8], 1) == [9]
    assert predicted.propose([7, 8, 9, 1, 7, 8], 2) == [9, 2]
    assert predicted.propose([7, 8, 9, 1, 7, 8, 9, 2, 7, 8], 2) == [9, 3]
    rejoined = PredictedOutput(line + [1] + line + [2] + line + [3])
    assert rejoined.propose([7, 8, 9, 1, 5], 2) == []  # left the prediction after its first line
    assert rejoined.propose([7, 8, 9, 1, 5, 7, 8], 2) == [9, 2]  # the next occurrence, not the first


def test_an_output_going_back_in_the_prediction_is_found_anywhere():
    predicted = PredictedOutput(PREDICTION)
    assert predicted.propose([10, 11, 12, 13, 14, 15, 16], 2) == [17, 18]
    assert predicted.propose([10, 11, 12, 13, 14, 15, 16, 17, 12, 13], 2) == [14, 15]


def test_tokens_are_matched_whole_never_across_token_boundaries():
    # The bytes of [0x33332222, 0x00054444] occur in the prediction's bytes, two bytes into its first token.
    prediction = [0x22221111, 0x44443333, 5, 6]
    assert PredictedOutput(prediction).propose([9, 0x33332222, 0x00054444], 2) == []
    assert PredictedOutput(prediction).propose([9, 0x44443333, 5], 2) == [6]


@settings(max_examples=200, deadline=None)
@given(prediction=st.lists(st.integers(0, 6), min_size=1, max_size=30),
       output=st.lists(st.integers(0, 6), min_size=1, max_size=30), k=st.integers(1, 6))
def test_every_draft_continues_an_occurrence_of_the_output_suffix(prediction, output, k):
    drafts = PredictedOutput(prediction).propose(output, k)
    assert len(drafts) <= k
    if drafts:
        starts = [start for start in range(len(prediction) - len(drafts) + 1)
                  if prediction[start : start + len(drafts)] == drafts and start >= 1
                  and prediction[start - 1] == output[-1]]
        assert starts, "drafts must follow an occurrence of the output's last token in the prediction"
