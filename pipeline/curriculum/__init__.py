"""Curricula: which training examples each epoch uses, and the data diet they belong to.

- ``checks``: the options' and inputs' checks, and ``CurriculumError``;
- ``pacing``: the pacing functions of Wu, Dyer & Neyshabur 2021, one registry;
- ``ordering``: the one order over training positions (curriculum / anti / random) and what it
  holds back, shared by every strategy;
- ``strategies``: ``Curriculum`` and its strategies (all data, tier stages, paced fraction,
  self-paced), built for a run's epochs and training-set size, one registry;
- ``diet``: a run's curriculum and pruning built together, with the project's rule that ties
  them to growth;
- ``inputs``: a run's ``--scores-run`` resolved, its scores loaded and its diet built.

Pure: no MLflow inside, except where ``inputs`` finds and loads the scores.
"""
