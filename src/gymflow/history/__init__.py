"""Run history: the catalog of the runs under a root, trends over time, and the regression gate."""
