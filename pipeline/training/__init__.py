"""Training, with no MLflow inside: ``config`` (options, optimizer), ``state`` (what an epoch
hands the next), ``epoch_loop`` (``fit`` and the ``TrainingPlan`` hooks), ``metrics`` (per-tier,
per-exit and label-noise measurements), ``checkpoints`` (save, and resume bit-exactly),
``health`` (the run's verdict), ``monitor`` (how much validation an epoch reads), ``average``
(the weight average). A budget's meter and re-planning, which the loop calls, are
``pipeline/budget/``.
"""
