"""A study's experiments (the grid), their state and the runs no study uses any more."""
