"""Lesson 04's checks judged on observations a submission could forge: every one fails, none passes by accident."""

from __future__ import annotations

import pytest

from grader.checks import _plain, lesson04

FORGED = [None, 0, 1.5, "x", [], {}, {"calls": []}, {"calls": [["[]", {"value": 1}]]},
          {"adam": {}, "fresh": {}, "sgd": {}}, {"mlp10": 0, "squares": 0, "mlp20": 0}, {"got": None}]
VISIBLE = [lesson04.check_bytes_per_param, lesson04.check_state_bytes, lesson04.check_training_bytes, lesson04.check_predict_saved_bytes,
           lesson04.check_activation_bytes, lesson04.check_max_batch]


@pytest.mark.parametrize("observation", FORGED, ids=repr)
@pytest.mark.parametrize("check", VISIBLE, ids=lambda c: c.what)
def test_a_forged_observation_never_passes(check, observation):
    with pytest.raises(Exception):
        check.judge(_plain.roundtrip(observation))


@pytest.mark.parametrize("observation", FORGED, ids=repr)
def test_hidden_checks_never_pass_a_forged_observation(observation):
    with pytest.raises(Exception):
        lesson04.state_bytes_on.judge(_plain.roundtrip(observation), widths=[100, 10], optimizer="adam", step=True,
                                      want={"parameters": 4040, "gradients": 4040, "optimizer": 8088}, why="w")
    with pytest.raises(Exception):
        lesson04.activation_on.judge(_plain.roundtrip(observation), widths=[7, 5], batch=3, want=84, why="w")


def test_hidden_expected_values_never_go_to_observe():
    assert lesson04.state_bytes_on.inputs == {"widths", "optimizer", "step"}
    assert lesson04.activation_on.inputs == {"widths", "batch", "norm"}
    assert lesson04.expect.inputs == {"args"}
