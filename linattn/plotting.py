"""Plotting helpers shared by the CLI and the figure notebooks."""

from __future__ import annotations


def show_loss(history, title: str = "") -> None:
    """Open a window with the training (and test) loss against the step."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, col in history.columns().items():
        if name in ("train_loss", "test_iwl", "test_icl"):
            ax.plot(history.step, col, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend()
    plt.show()
