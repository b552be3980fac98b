"""Difficulty scores and tiers, and the table that carries them between steps; no MLflow
outside ``scores_table``'s finding and loading.

``scorers`` (the scorers, by name); ``folds`` (stratified folds, the cross-fit ledger);
``cross_fit`` (training the fold models and scoring with them); ``tiers`` (cutting and
applying tiers); ``stability`` (rank correlations); ``scores_table`` (the parquet table: write,
read, check, ``load_scores``, ``find_scores_run``); ``figures`` (a scores run's figures). The
entry point that runs them is ``pipeline/score_difficulty.py``.
"""
