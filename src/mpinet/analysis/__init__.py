"""Tables, statistics, the cost model and the figures, from finished runs."""
