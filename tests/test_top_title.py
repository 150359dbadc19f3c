"""plotting.top_title puts a title where matplotlib's own placement puts it on axes with nothing above their top."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from linattn.companion.plotting import loss_panel, top_title, use_style  # noqa: E402

LEVELS = np.array([1.0, 0.64, 0.38, 0.21, 0.14])


def _title_box(placed: bool, *, log_steps: bool, ticks_on_top: bool = False) -> np.ndarray:
    """The drawn title's box (display pixels) of a loss panel with a theory axis, titled by top_title (``placed``)
    or by matplotlib's own placement; ``ticks_on_top`` puts x tick labels above the axes."""
    use_style()
    fig, ax = plt.subplots(figsize=(3.4, 2.6))
    step = np.arange(2000)
    loss_panel(ax, step, [np.interp(step, [0, 500, 1000, 1999], [1.0, 0.64, 0.21, 0.14])], LEVELS,
               log_steps=log_steps)
    if ticks_on_top:
        ax.xaxis.set_tick_params(labeltop=True)
    if placed:
        top_title(ax, "a title $t$")
    else:
        ax.set_title("a title $t$")
    fig.tight_layout()
    fig.canvas.draw()
    box = ax.title.get_window_extent().get_points()
    plt.close(fig)
    return box


@pytest.mark.parametrize("log_steps", [False, True])
def test_top_title_is_where_matplotlib_places_a_title_on_a_loss_panel(log_steps):
    assert np.array_equal(_title_box(True, log_steps=log_steps), _title_box(False, log_steps=log_steps))


def test_matplotlib_raises_a_title_over_top_tick_labels_and_top_title_does_not():
    # the case top_title is not for: tick labels above the axes push matplotlib's title up, top_title's stays
    placed, auto = (_title_box(p, log_steps=False, ticks_on_top=True) for p in (True, False))
    assert auto[0, 1] > placed[0, 1] + 5  # display pixels, y up
