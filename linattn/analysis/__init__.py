"""The readings of a trained run; none of them trains.

    loss_curves  plateaus and drops of a loss curve, read against the theory's saddle levels
    diagnostics  what a trained model's weights show (``linattn.diagnostics``)
    events       who learns what, when: the order and timing of the modes' rises

Each is public as ``linattn.<name>`` (``linattn.loss_curves``, …), given on first use.
"""
