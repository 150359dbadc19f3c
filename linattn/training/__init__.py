"""One training run, from its settings to its record, and many at once.

    plan        check a RunConfig and draw its data and initial weights (or take the given ones)
    experiment  train one planned run: ``linattn.run``
    train, flow the dynamics: gradient descent, gradient flow (and the run's History)
    result      a run's record (RunResult), written to a folder and read back
    keys        a run's address: a hash of what decides its numbers
    batch       many runs: ``linattn.run_many``, stacked on one engine where they share a shape (``_stacked``)
    memory      what a run's data and weights need, refused before it starts when they cannot fit
"""
