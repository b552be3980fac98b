"""Difficulty scores, and the table that carries them (with their tiers) between steps; no
MLflow outside ``scores_table``'s finding and loading. The tiers themselves (names, cutting,
applying) are ``pipeline/data/tiers.py``: training and the report read them too.

``scorers`` (the scorers, by name); ``folds`` (stratified folds, the cross-fit ledger);
``cross_fit`` (training the fold models and scoring with them); ``stability`` (rank
correlations); ``scores_table`` (the parquet table: write, read, check, ``load_scores``,
``find_scores_run``); ``figures`` (a scores run's figures). The entry point that runs them is
``pipeline/score_difficulty.py``.
"""
