"""Lesson 02's corrections (issue 11), held by tests: each fails on the lesson's old text or code."""

from __future__ import annotations

import re
import sys

import pytest
import torch

from conftest import ROOT, read_notebook, quiet_model
from notebook_cells import cell_index, graded, shown_by
from grader import gpu
from grader.checks import _plain, lesson02
from grader.notebook import CheckFailed
from grader.syncs import SyncCounter, modelled_seconds
from mutants.lesson02 import MASKED, PINNED, RESIDENT, _ANSWERS, loop_source

sys.path.insert(0, str(ROOT / "scripts"))
import build_keys  # noqa: E402

SOLUTION = ROOT / "solutions" / "02_transfers" / "02_transfers.ipynb"
JUDGES = build_keys.instructor_judges("02_transfers")  # solutions/judges/lesson02.py: the course's models, never packaged


def _text() -> str:
    """The solution notebook's cells, whitespace runs made one space (so sentences match across line breaks)."""
    return " ".join(" ".join(cell.source for cell in read_notebook(SOLUTION).cells).split())


def _loop(source: str):
    ns: dict = {}
    exec(compile(source, "<learner>", "exec"), ns)
    return ns["train_fixed"]


VERSIONS = {  # the lesson's four loops: the buggy loop's step (its outlier mask) in each
    "buggy": loop_source("losses.append(loss.item())", ret="losses", loss=MASKED),
    "read once": loop_source("losses.append(loss.detach())", loss=MASKED),
    "resident": loop_source("losses.append(loss.detach())", loss=MASKED, **RESIDENT),
    "pinned": loop_source("losses.append(loss.detach())", loss=MASKED, **PINNED),
}
FIXED = {  # the same, with a loss the host need not wait for
    "read once": loop_source("losses.append(loss.detach())"),
    "resident": loop_source("losses.append(loss.detach())", **RESIDENT),
    "pinned": loop_source("losses.append(loss.detach())", **PINNED),
}


# --- a copy from pageable memory is a sync point ---------------------------------------------------


@pytest.mark.parametrize("code,waits", [("x.to(device)", True), ("x.to(device, non_blocking=True)", True),
                                        ("x.pin_memory().to(device)", True),
                                        ("x.pin_memory().to(device, non_blocking=True)", False)])
def test_only_a_pinned_non_blocking_copy_leaves_the_host_free(code, waits):
    with SyncCounter("cuda") as counter:
        exec(compile(code, "<learner>", "exec"), {"torch": torch, "device": counter.device, "x": torch.randn(8)})
    assert counter.copies == 1 and counter.sync_points == int(waits) and counter.blocking_copies == int(waits)
    assert ("non_blocking" in counter.events[0].op) == ("non_blocking" in code)


@pytest.mark.parametrize("steps,n_batches", [(16, 4), (5, 2), (3, 5)])
@pytest.mark.parametrize("version", lesson02.LOOP_VERSIONS)
def test_the_sync_point_model_is_what_the_counter_measures(version, steps, n_batches):
    with SyncCounter("cuda") as counter:
        _loop(VERSIONS[version])(lesson02.make_model(), lesson02.make_batches(n_batches), counter.device, steps)
    assert counter.sync_points == JUDGES._sync_points_model(version, steps, n_batches)


def test_the_64_vs_49_gap_is_the_pageable_copies_and_the_mask():
    # the lesson's defaults (16 steps): the usual first fix (read once) keeps 32 blocking copies and 16 mask reads
    assert JUDGES._sync_points_model("buggy", 16, 4) == 16 + 16 + 32 == 64
    assert JUDGES._sync_points_model("read once", 16, 4) == 1 + 16 + 32 == 49
    text = _text()
    # what the first fix leaves is printed from the counter when the cell runs (tests/lesson_outputs.py), not written
    # in the cell's source: copy test r12 read the quiz's answers for .item(), a pageable copy and a mask there
    assert "boolean-mask indexings inside the loop" not in text and "removed the {steps} .item() reads" not in text
    assert "memcpy_and_sync" in text and "cudaStreamSynchronize" in text  # what PyTorch does, cited
    assert lesson02.PROBES["x_host.to(device)"] == "x_host.to(device)"  # the probe table shows the copy


def test_the_old_fix_fails_train_fixed_on_copies_inside_the_loop():
    with pytest.raises(CheckFailed, match=r"inside the step loop with blocking copies"):
        lesson02.check_train_fixed(_loop(FIXED["read once"]))
    lesson02.check_train_fixed(_loop(FIXED["resident"]))
    lesson02.check_train_fixed(_loop(FIXED["pinned"]))


@pytest.mark.parametrize("version", ["resident", "pinned"])
def test_the_usual_ways_out_keep_the_steps_own_sync_point(version):
    """Wave 2: the buggy loop's step indexes a boolean mask (a size the data decides), which neither textbook way out
    (resident, pinned) removes; the learner finds it and a loss of the same value without it."""
    with pytest.raises(CheckFailed, match=r"indexes with a boolean mask once per step"):
        lesson02.check_train_fixed(_loop(VERSIONS[version]))
    with SyncCounter("cuda") as counter:
        _loop(VERSIONS[version])(lesson02.make_model(), lesson02.make_batches(), counter.device, 16)
    assert counter.by_op("read")["boolean mask"] == 16


def test_a_filter_worked_out_before_the_loop_passes():
    """The outliers can be left out of the data set once, before the loop (on the host, or on the device)."""
    keep = ("batches = [(x[k[:, 0]], y[k[:, 0]]) for x, y in batches for k in [(y - y.mean()).abs() <= 2 * y.std()]]"
            "\n    ")
    move = "batches = [(x.to(device), y.to(device)) for x, y in batches]\n    "
    for before in (keep + move, move + keep):  # on the host, then copied; or copied, then on the device
        source = loop_source("losses.append(loss.detach())", move="pass", loss="loss = (model(x) - y).square().mean()",
                             before=before)
        lesson02.check_train_fixed(_loop(source))


def test_a_masked_mean_on_the_device_passes_quietly(capsys):
    """Outside tester: torch.masked.mean keeps the kept rows' mean on the device with no data-dependent shape (its
    strided path sums where the mask holds and divides by the mask's sum), so it passes: the counter sees no sync point
    inside the loop, and the check cell shows nothing on stderr, no warning."""
    import warnings

    loss = ("keep = (y - y.mean()).abs() <= 2 * y.std()\n"
            "        loss = torch.masked.mean((model(x) - y).square(), mask=keep)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would be stderr in the check cell
        for ways in (RESIDENT, PINNED):
            lesson02.check_train_fixed(_loop(loop_source("losses.append(loss.detach())", loss=loss, **ways)))
        with SyncCounter("cuda") as counter:  # outside the check too (section 4's table runs it so), no warning
            _loop(loop_source("losses.append(loss.detach())", loss=loss, **RESIDENT))(
                lesson02.make_model(), lesson02.make_batches(), counter.device, 8)
    assert counter.by_op() == {".to(device)": 2 * lesson02.N_BATCHES, ".tolist()": 1}  # before and after the loop
    assert capsys.readouterr().err == ""


def test_a_boolean_mask_every_step_is_named_without_the_way_round_it():
    """The mask's message names what the line does and why the host waits, not how to keep the mean on the device."""
    with pytest.raises(CheckFailed) as failed:
        lesson02.check_train_fixed(_loop(loop_source("losses.append(loss.detach())", loss=MASKED, **RESIDENT)))
    said = str(failed.value)
    assert "boolean mask" in said and "makes the host wait" in said
    for recipe in ("where", "masked", "zero", "sum", "divide", "multiply", "count of", "instead"):
        assert recipe not in said, (recipe, said)


def test_the_masked_loss_drops_rows_in_the_checks_data():
    kept = [int(((y - y.mean()).abs() <= 2 * y.std()).sum()) for _, y in lesson02.make_batches()]
    assert all(0 < k < lesson02.BATCH for k in kept), kept


# --- one stream runs in order; overlap needs a side stream ----------------------------------------


def test_no_claim_of_overlap_on_one_stream():
    text = _text()
    assert "The copy engine then moves it while the device computes" not in text
    assert "Pinned memory with `non_blocking=True` lets copies overlap compute" not in text
    for needed in ("torch.cuda.Stream()", "wait_stream", "record_stream", "event.synchronize()"):
        assert needed in text, needed


def test_the_link_model_charges_pinned_copies_on_one_stream():
    with SyncCounter("cuda") as counter:
        exec(compile("p = x.pin_memory(); d = p.to(device, non_blocking=True)", "<learner>", "exec"),
             {"torch": torch, "device": counter.device, "x": torch.randn(250)})  # 1000 bytes
    cost = lambda n, b, lat: lat + n / b  # noqa: E731
    assert modelled_seconds(counter, cost, 1e9, 1e-5) == pytest.approx(1e-5 + 1000 / 1e9)
    assert modelled_seconds(counter, cost, 1e9, 1e-5, side_stream=True) == pytest.approx(1e-5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("call", [lambda: gpu.copy_compute_overlap(1024, 64), lambda: gpu.early_host_read(64)])
def test_stream_functions_refuse_clearly_without_cuda(call):
    with pytest.raises(RuntimeError, match="NVIDIA GPU"):
        call()


# --- the quiz names the idea, not the answers -------------------------------------------------------


@pytest.mark.parametrize("label", sorted(_ANSWERS))
def test_a_wrong_quiz_answer_names_the_idea_not_the_label(label):
    answers = {**_ANSWERS, label: not _ANSWERS[label], "why": "a reason"}
    fraction, message = lesson02.check_sync_answers.band(lesson02.check_sync_answers.valid(answers), {})
    assert fraction < 1
    assert lesson02._concepts()[lesson02._concept_of()[label]] in message
    assert not re.search(r"\([a-r]\)", message), message  # no label
    assert "does make the host wait" not in message and "does not make the host wait" not in message
    assert lesson02.SYNC_SNIPPETS[label].splitlines()[0] not in message


def test_the_quiz_answers_are_what_the_counter_sees():
    assert {label: lesson02.snippet_waits(label) for label in lesson02.SYNC_SNIPPETS} == _ANSWERS


# --- graphs kept alive ------------------------------------------------------------------------------


def test_the_observation_counts_graphs_kept_alive():
    leaky = lesson02._observe_train_fixed(_loop(loop_source("losses.append(loss)", **RESIDENT)))
    fixed = lesson02._observe_train_fixed(_loop(FIXED["resident"]))
    assert [r["graphs_alive"] for r in leaky["runs"]] == [7, 15]
    assert all(r["graphs_alive"] <= 1 for r in fixed["runs"])


# --- the two halves ---------------------------------------------------------------------------------


def test_hidden_expected_values_never_go_to_observe():
    assert lesson02.fixed_on.inputs.isdisjoint({"want", "why"})


FORGED = [None, 3, "text", [], {}, [1, 2], {"runs": None}, {"runs": [{}, {}]}, {"calls": "x"},
          {"runs": [{"got": [], "steps": 1, "events": "x", "forwards": 0, "graphs_alive": 0}] * 2, "batch_bytes": []}]


@pytest.mark.parametrize("check", [lesson02.check_link_from_copies, lesson02.check_sync_answers,
                                   lesson02.check_sync_points, lesson02.check_train_fixed])
@pytest.mark.parametrize("forged", FORGED, ids=[repr(f)[:30] for f in FORGED])
def test_judges_refuse_forged_observations(check, forged):
    with pytest.raises(Exception):  # noqa: B017  any exception: the pipeline turns it into a failure
        check.judge(_plain.roundtrip(forged))


def test_a_loop_that_calls_forward_directly_is_still_followed():
    lesson02.check_train_fixed(_loop(FIXED["resident"].replace("model(x)", "model.forward(x)")))
    with pytest.raises(CheckFailed, match="graphs were still alive"):
        lesson02.check_train_fixed(_loop(loop_source("losses.append(loss)", **RESIDENT).replace("model(x)", "model.forward(x)")))


# --- every exercise makes the learner think (issue 20) ---------------------------------------------


def _at(predicate) -> int:
    return cell_index("02_transfers", predicate)


def test_the_probe_table_comes_after_the_quiz_and_leaves_some_lines_to_reason_out():
    assert _at(graded("SYNC_ANSWERS_check")) < _at(shown_by("lesson02.show_probes()"))
    probes = " ".join(lesson02.PROBES.values())
    unlisted = [label for label, line in lesson02.SYNC_SNIPPETS.items() if line.split("=")[-1].strip() not in probes]
    assert len(unlisted) >= 3, unlisted


def test_the_counts_and_the_fix_come_after_the_exercises_they_would_answer():
    assert _at(graded("sync_points_check")) < _at(shown_by("display(event_table(counter))"))
    assert _at(graded("train_fixed_check")) < _at(shown_by("lesson02.train_read_once(lesson02.make_model"))
    assert _at(graded("train_fixed_check")) < _at(shown_by("lesson02.WAYS_OUT.items()"))
    assert _at(graded("COPY_PREDICTION")) < _at(shown_by("1000 * transfer_seconds(4096"))


def test_sync_points_is_checked_with_fewer_steps_than_batches():
    assert any(steps < n_batches for version, steps, n_batches in lesson02._PREDICT_CASES if version == "resident")


def test_the_copy_prediction_is_judged_against_the_two_copies_together(capsys):
    """COURSE.md 02, third edition: reading each printed copy alone must not pass (it did at 5% on the old copies)."""
    (small, t_small), (big, t_big) = lesson02.LINK_COPIES
    bandwidth = (big - small) / (t_big - t_small)
    latency = t_small - small / bandwidth

    def guess(lat, bw):
        return {"1000 copies of 4 KiB": 1000 * (lat + 4096 / bw), "1 copy of 4 MiB": lat + 4 * 2**20 / bw, "why": "w"}

    assert lesson02.check_copy_prediction.band(guess(latency, bandwidth), {})[0] == 1.0
    fraction, said = lesson02.check_copy_prediction.band(guess(t_small, big / t_big), {})
    assert fraction == 0.0 and "read each copy alone" in said
    assert t_small > 2 * latency  # the small copy's bytes are a good part of its time


@pytest.mark.parametrize("name", ["no fixed cost: time in proportion to bytes", "each copy's own rate applied to another size"])
def test_a_later_answer_without_a_fixed_cost_is_told_that_mistake_not_the_fallback(name, capsys):
    """Outside tester: an answer with time in proportion to bytes, or each copy's bytes per second applied to the other
    size, was told "work that link out from those two copies alone, not from figures for other links", though it used
    only the two copies. Its own mistake is named now, after a first guess and as the answer changed later."""
    from grader import predictions
    from mutants.lesson02 import PREDICTION_MUTANTS

    source, pattern = next((src, pat) for n, src, pat in PREDICTION_MUTANTS["COPY_PREDICTION_check"] if n == name)
    ns: dict = {}
    exec(compile(source, "<mutant>", "exec"), ns)
    wrong = ns["COPY_PREDICTION"]
    right = {**wrong, "1000 copies of 4 KiB": 8.17e-3, "1 copy of 4 MiB": 182.8e-6}  # near the two copies' link
    predictions.commit(lesson02.LESSON, "COPY_PREDICTION", right, right["why"])
    _, said = lesson02.check_copy_prediction._score(wrong, predictions._load())
    now = said[said.index("your answer now:"):]
    assert re.search(pattern, now) and "other links" not in now, said
    assert not re.search(r"\d", now.replace("(section 1)", "")), now  # a kind of mistake, no value


def test_the_quiz_asks_about_a_non_blocking_copy_from_pageable_memory():
    """COURSE.md 02, third edition: non_blocking=True from pageable memory still makes the host wait (the driver
    stages it); the quiz has that line, and the counter says it waits."""
    label = next(k for k, line in lesson02.SYNC_SNIPPETS.items() if "x_host" in line and "non_blocking=True" in line)
    assert lesson02.snippet_waits(label) is True


def test_the_quiz_text_gives_the_principle_and_not_the_lines():
    """Audit (issue 29): ten of the seventeen quiz lines were named in the text above it."""
    import nbformat

    from conftest import ROOT

    nb = nbformat.read(str(ROOT / "solutions" / "02_transfers" / "02_transfers.ipynb"), as_version=4)
    quiz = next(i for i, c in enumerate(nb.cells) if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "SYNC_ANSWERS")
    above = "\n".join(c.source for c in nb.cells[:quiz] if c.cell_type == "markdown")
    section = above[above.index("## 2 ·"):]
    named = [k for k, line in lesson02.SYNC_SNIPPETS.items()
             if any(op in section for op in (".item()", "float(t)", "print(t)", "nonzero", ".cpu()", ".tolist()"))]
    assert not named, "section 2's text lists the quiz's lines"


def test_each_quiz_line_earns_its_share():
    right = {label: lesson02.snippet_waits(label) for label in lesson02.SYNC_SNIPPETS}
    one_wrong = {**right, "g": not right["g"], "why": "w"}
    assert lesson02.check_sync_answers.band({**right, "why": "w"}, {})[0] == 1.0
    assert 0 < lesson02.check_sync_answers.band(one_wrong, {})[0] < 1


def test_the_quiz_feedback_names_ideas_not_how_many_lines_are_wrong():
    """Round 3's copy test flipped one line at a time and read "k lines disagree": all 18 answers in 19 tries. Two
    guesses in the same band that miss the same idea on one line and on two get the same feedback."""
    right = {label: lesson02.snippet_waits(label) for label in lesson02.SYNC_SNIPPETS}
    one = lesson02.check_sync_answers.band({**right, "p": not right["p"], "why": "w"}, {})
    two = lesson02.check_sync_answers.band({**right, "p": not right["p"], "q": not right["q"], "why": "w"}, {})
    assert one == two and not re.search(r"\d", one[1])


def test_the_page_says_what_the_quiz_feedback_names():
    """Outside tester: the page said the feedback "names the ideas behind the lines you got wrong, never the labels",
    but each idea names its code ("printing a tensor, or formatting it in an f-string"), so it points at the lines.
    The page says so now: the kind of operation of each line that disagrees, never whether a line waits."""
    text = _text()
    assert "never the labels" not in text
    assert "names the kind of operation each of those lines does, close enough to the code" in text
    right = {label: lesson02.snippet_waits(label) for label in lesson02.SYNC_SNIPPETS}
    for label in lesson02.SYNC_SNIPPETS:
        said = lesson02.check_sync_answers.band({**right, label: not right[label], "why": "w"}, {})[1]
        assert "disagrees" in said and f"({label})" not in said, said
        assert not re.search(r"\bwaits\b|does not wait|doesn't wait", said), said


def test_a_non_blocking_copy_from_pageable_memory_is_not_called_a_stream_sync():
    """COURSE.md 02, third edition: memcpy_and_sync syncs the current stream; non_blocking=True from pageable memory
    is a cudaMemcpyAsync that 'might be synchronous', blocks the host, and set_sync_debug_mode does not see it."""
    import nbformat

    from conftest import ROOT

    nb = nbformat.read(str(ROOT / "solutions" / "02_transfers" / "02_transfers.ipynb"), as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "might be synchronous" in text and "cudaMemcpyAsync" in text
    assert "does not see it" in text and "(not on every\nstream)" in text


# --- the outside copy test of the third edition (ct0102): each shortcut it took ---------------------


def test_no_cell_writes_out_the_loops_train_fixed_asks_for():
    """ct0102: train_resident, pasted from a later cell, passed train_fixed. The ways out live in the package now,
    and a train_fixed that calls one is noticed."""
    cells = read_notebook(SOLUTION).cells
    for name in ("train_resident", "train_pinned", "train_read_once"):
        assert not [c for c in cells if f"def {name}" in c.source], name
        calls = _loop(f"from grader.checks import lesson02\ndef train_fixed(model, batches, device, steps):\n"
                      f"    return lesson02.{name}(model, batches, device, steps)\n")
        with pytest.raises(CheckFailed, match=rf"calls grader\.checks\.lesson02\.{name}"):
            lesson02.check_train_fixed(calls)


@pytest.mark.parametrize("variant", ["losses.append(loss.item())", "losses.append(loss)"])
def test_train_fixed_names_the_mistake_without_the_recipe(variant):
    """ct0102: three guided tries passed train_fixed, its messages giving `loss.detach()`, `torch.stack(losses).tolist()`
    and 'move the batches to the device once, before the loop'."""
    sources = [loop_source(variant, ret="losses"), loop_source("losses.append(loss.detach())"),
               loop_source("losses.append(loss.detach())", move="x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"),
               loop_source("losses.append(loss.detach())", **RESIDENT, ret="[l.item() for l in losses]"),
               loop_source("losses.append(loss.detach())", **RESIDENT, ret="losses")]
    for source in sources:
        with pytest.raises(CheckFailed) as failed:
            lesson02.check_train_fixed(_loop(source))
        said = str(failed.value)
        for recipe in ("detach()", "torch.stack", ".tolist()", "pin_memory", "before the loop", "once, after",
                       "Move the", "Keep loss"):
            assert recipe not in said, (recipe, said)


def test_the_copy_prediction_link_is_no_constant_and_asking_for_it_is_a_reveal():
    """ct0102: `lesson02._LINK`, a plain constant, gave COPY_PREDICTION 1 / 1 before any guess."""
    from grader import predictions

    assert not hasattr(lesson02, "_LINK")
    lesson02._implied_link()  # a cell asking for the link before the first guess
    assert predictions.entry(lesson02.LESSON, "COPY_PREDICTION").get("revealed")


@pytest.mark.parametrize("ask", ["lesson02.show_probes()", "lesson02._concept_of()", "lesson02._doing('.item()')", "lesson02._concepts()",
                                 "_sealed.source(lesson02.LESSON, '_read_of')"])
def test_the_quiz_key_is_sealed_and_asking_for_it_is_a_reveal(ask):
    """Copy test r6 answered SYNC_ANSWERS from the package: grader/syncs.py's docstring and READS table listed every call
    that makes the host wait, lesson02's _CONCEPT_OF grouped the quiz's lines by idea, and the reveal cell's source
    printed the groups that wait. Now none is readable; opening any of them from a cell before the guess is a reveal."""
    import inspect

    from grader import predictions, syncs
    from grader.checks import _sealed

    source = inspect.getsource(syncs) + inspect.getsource(lesson02)
    for said in ('"item": ".item()"', '"masked_select": ', '"__bool__"', "five groups", '"f": "size"', "indexes with a boolean mask", "is anything read?"):
        assert said not in source, said
    assert not (predictions.entry(lesson02.LESSON, "SYNC_ANSWERS") or {}).get("revealed")
    exec(compile(ask, "<cell>", "exec"), {"lesson02": lesson02, "_sealed": _sealed})
    assert predictions.entry(lesson02.LESSON, "SYNC_ANSWERS").get("revealed")


def test_the_reveal_counts_the_groups_it_lists(capsys):
    """Outside tester: the reveal said "four groups" and listed four, then added "; and a copy from pageable memory",
    which reads as a fifth. The number it says is the number of groups it lists (one a clause, `;` between them)."""
    lesson02.show_probes()
    said = " ".join(capsys.readouterr().out.split())
    count, listed = re.search(r"fall in (\w+) groups: (.*?\.)(?: |$)", said).groups()
    while re.search(r"\([^()]*\)", listed):  # the examples in parentheses hold `;` and `()` of their own
        listed = re.sub(r"\([^()]*\)", "", listed)
    groups = [g for g in listed.split(";") if g.strip()]
    assert {"three": 3, "four": 4, "five": 5, "six": 6}[count] == len(groups), (count, groups)
    assert "pageable" in groups[-1]


def test_a_counter_run_before_the_quiz_is_answered_is_a_reveal():
    """ct0102: the counter on the quiz's lines, before the first guess, measures the answers."""
    from grader import predictions

    with SyncCounter("cuda") as counter:
        exec(compile("loss = torch.ones((), device=device); loss.item()", "<cell>", "exec"),
             {"torch": torch, "device": counter.device})
    assert predictions.entry(lesson02.LESSON, "SYNC_ANSWERS").get("revealed")


def test_the_quiz_ideas_ask_and_do_not_answer():
    """ct0102: `_CONCEPTS` said of each idea whether the host waits (\"only queued: the host goes on at once\"), and
    `_CONCEPT_OF` mapped every label to one: an answer key in the package."""
    for text in lesson02._concepts().values():
        assert text.rstrip().endswith("?"), text
        for said in ("returns at once", "goes on at once", "needs its", "must wait", "waits for", "only queued",
                     "nothing is read", "already has", "synchronizes"):
            assert said not in text, (said, text)
    for concept in set(lesson02._concept_of().values()):
        assert concept not in ("queued", "on device", "shape", "host copy"), concept


def test_a_counter_run_in_a_cell_before_sync_points_is_checked_is_noticed():
    """ct0102: the four loops measured under the counter in an earlier cell, then looked up, passed sync_points."""
    lesson02.check_sync_points.passed.clear()  # a fresh kernel: the check has not passed yet (the tests share one process)
    ns = {"torch": torch}
    exec(compile("from grader.syncs import SyncCounter\nwith SyncCounter('cuda') as counter:\n"
                 "    torch.ones((), device=counter.device).item()\n", "<cell>", "exec"), ns)
    with pytest.raises(CheckFailed, match=r"called grader\.syncs\.SyncCounter before your sync_points was checked"):
        lesson02.check_sync_points(lambda version, steps, n_batches: 3 * steps)


def test_link_from_copies_is_asked_about_runs_that_a_line_through_their_totals_misreads():
    """Wave 2: link_from_copies was a two-point line through (bytes, seconds), stated on the page. Its cases are runs
    of k copies now: a line through each run's total bytes and total time (the textbook reading) is wrong on them."""
    totals_wrong = 0
    for (runs,) in lesson02._FIT_CASES:
        latency, bandwidth = JUDGES._line(runs)
        assert all(close_enough(t, k * (latency + n / bandwidth)) for k, n, t in runs)
        totals_wrong += not all(close_enough(a, b) for a, b in zip(JUDGES._through([(k * n, t) for k, n, t in runs]),
                                                                    (latency, bandwidth)))
    assert totals_wrong >= 3
    assert any(len({n for _, n, _ in runs}) < len(runs) for (runs,) in lesson02._FIT_CASES)  # two runs of one size


def close_enough(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * abs(b)


def test_a_copy_guess_at_half_the_band_is_not_told_it_holds():
    """Copy test r22: a first guess from the course's assumed constants (10 µs per copy, 31.5 GB/s) scored half the band
    and was told "your first guess holds on the link the two copies imply". Half credit now says the guess is not
    that link's, with no value in the message."""
    from grader import shortcuts

    band = quiet_model(lesson02._copy_band)
    guess = {"1000 copies of 4 KiB": 1000 * (10e-6 + 4096 / 31.5e9), "1 copy of 4 MiB": 10e-6 + 4 * 2**20 / 31.5e9}
    fraction, said = band(guess, {})
    assert fraction == 0.5 and "holds" not in said and "not what the link" in said, (fraction, said)
    assert not re.search(r"\d\.\d|\d\d", said), said  # no value (a section number may stay)
    latency, bandwidth = quiet_model(lesson02._implied_link)()
    right = {"1000 copies of 4 KiB": 1000 * (latency + 4096 / bandwidth), "1 copy of 4 MiB": latency + 4 * 2**20 / bandwidth}
    assert band(right, {}) == (1.0, "your first guess holds on the link the two copies imply")


def test_the_course_latency_with_the_big_copys_rate_is_not_the_two_copies_link():
    """Copy test r23: the course's assumed 10 µs per copy (LATENCY, in the set-up cell) with the big copy's bytes over
    its time as the rate earned the full band at 25%: the fixed cost has to come from the two copies."""
    from grader import shortcuts

    (_, _), (big_bytes, big_s) = lesson02.LINK_COPIES
    rate = big_bytes / big_s
    guess = {"1000 copies of 4 KiB": 1000 * (10e-6 + 4096 / rate), "1 copy of 4 MiB": 10e-6 + 4 * 2**20 / rate}
    fraction, said = quiet_model(lesson02._copy_band)(guess, {})
    assert fraction == 0.5 and "holds" not in said, (fraction, said)
