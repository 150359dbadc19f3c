"""A known fallback is not a failure (issue 37, item 9): an engine's slower path with the same result (no C
compiler) is a :class:`~linattn.objectives.native.KnownFallback`, which the figure runner takes off the page and
reports on the figure's line and in its provenance; any other printed warning still fails the figure."""

from __future__ import annotations

import nbformat

from linattn.companion.runner import notebooks, schedule
from linattn.objectives.native import KnownFallback, fallback_reason

EXACT = ("the exact engine's C kernel could not be built (FileNotFoundError: [Errno 2] No such file or directory: "
         "'/nonexistent'); it takes the torch step (same result, slower)")


def _printed(category: str, message: str, source: str = "steps = compiled(model, tests)") -> str:
    """A warning as Python's warnings module prints it into a cell's stderr."""
    return f"/site/linattn/training/train.py:115: {category}: {message}\n  {source}\n"


def _executed(*streams: str, with_figure: bool = True) -> nbformat.NotebookNode:
    """An executed notebook: one code cell per stream text (stderr), each after an image output."""
    cells = []
    for text in streams:
        cell = nbformat.v4.new_code_cell("train()")
        if with_figure:
            cell.outputs.append(nbformat.v4.new_output("display_data", data={"image/png": "iVBOR"}))
        cell.outputs.append(nbformat.v4.new_output("stream", name="stderr", text=text))
        cells.append(cell)
    return nbformat.v4.new_notebook(cells=cells)


def test_known_fallbacks_are_taken_off_the_page_once_each():
    nb = _executed(_printed("KnownFallback", EXACT), _printed("KnownFallback", EXACT) + "training done\n")
    assert notebooks.take_known_fallbacks(nb) == [EXACT]
    assert notebooks.printed_warnings(nb) == []
    first, second = (cell.outputs for cell in nb.cells)
    assert [o.output_type for o in first] == ["display_data"]  # the emptied stream is gone, the figure stays
    assert second[-1].text == "training done\n"


def test_an_unknown_warning_beside_a_fallback_still_fails_the_figure():
    nb = _executed(_printed("KnownFallback", EXACT) + _printed("UserWarning", "Port 8787 is already in use"))
    assert notebooks.take_known_fallbacks(nb) == [EXACT]
    assert notebooks.printed_warnings(nb) == [
        "/site/linattn/training/train.py:115: UserWarning: Port 8787 is already in use"]


def test_a_warning_that_merely_mentions_the_name_is_not_a_fallback():
    text = _printed("RuntimeWarning", "KnownFallback: not really")
    nb = _executed(text)
    assert notebooks.take_known_fallbacks(nb) == []
    assert len(notebooks.printed_warnings(nb)) == 1


def test_the_fallback_reason_is_one_short_line():
    err = RuntimeError("cc could not compile exact_kernel.c: line 1\nline 2\n" + "x" * 400)
    reason = fallback_reason(err)
    assert "\n" not in reason and len(reason) == 200 and reason.startswith("RuntimeError: cc could not compile")
    assert issubclass(KnownFallback, RuntimeWarning)


def test_the_runners_line_names_each_fallback():
    res = schedule.FigureResult("fig05_softmax", "ran", 12.0, 11.0, fallbacks=(EXACT,))
    assert schedule.done_line(res) == f"  done    fig05_softmax  (12.0 s, 11.0 s CPU); fallback: {EXACT}"
    assert schedule.done_line(schedule.FigureResult("x", "ran", 1.0, 1.0)) == "  done    x  (1.0 s, 1.0 s CPU)"
