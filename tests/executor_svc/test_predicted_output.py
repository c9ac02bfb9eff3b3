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
    assert predicted.propose([10, 11], 3) == [12, 13, 14]
    assert predicted.propose([10, 11, 12, 13, 14, 15], 5) == [16, 17, 18, 19]
    assert predicted.propose(PREDICTION, 3) == []


def test_an_edit_stops_the_drafts_until_the_output_rejoins_the_prediction():
    predicted = PredictedOutput(PREDICTION)
    assert predicted.propose([10, 11, 12, 99], 3) == []
    assert predicted.propose([10, 11, 12, 99, 98], 3) == []
    assert predicted.propose([10, 11, 12, 99, 98, 15], 3) == [16, 17, 18]  # a deletion: the output skipped 13, 14


def test_a_repeated_stretch_is_continued_forward_from_the_last_match():
    line = [7, 8, 9]
    predicted = PredictedOutput(line + [1] + line + [2] + line + [3])
    assert predicted.propose([7, 8], 1) == [9]
    assert predicted.propose([7, 8, 9, 1, 7, 8], 2) == [9, 2]
    assert predicted.propose([7, 8, 9, 1, 7, 8, 9, 2, 7, 8], 2) == [9, 3]


def test_an_output_going_back_in_the_prediction_is_found_by_two_or_more_tokens():
    predicted = PredictedOutput(PREDICTION)
    assert predicted.propose([10, 11, 12, 13, 14, 15, 16], 2) == [17, 18]
    assert predicted.propose([10, 11, 12, 13, 14, 15, 16, 17, 12, 13], 2) == [14, 15]
    assert predicted.propose([5, 12], 2) == []  # one token found only behind the last match: no draft


def test_tokens_are_matched_whole_never_across_token_boundaries():
    # 0x00000100 and 0x00010000 share bytes with a word straddling two tokens; only whole tokens may match.
    predicted = PredictedOutput([1 << 8, 1 << 16, 5])
    assert predicted.propose([1], 2) == []
    assert predicted.propose([1 << 16], 2) == [5]


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
