"""Training, with no MLflow inside: ``config`` (options, optimizer), ``state`` (what an epoch
hands the next), ``epoch_loop`` (``fit`` and the ``TrainingPlan`` hooks), ``loop`` (one epoch's
steps, one evaluation pass), ``metrics`` (per-tier, per-exit and label-noise measurements),
``probes`` (what an epoch measures beside training, handed to ``fit``), ``checkpoints`` (save,
and resume bit-exactly), ``pace`` (how often a checkpoint is written), ``health`` (the run's
verdict), ``monitor`` (how much validation an epoch reads), ``average`` (the weight average). A
budget's meter and re-planning, which the loop calls, are ``pipeline/budget/``.
"""
