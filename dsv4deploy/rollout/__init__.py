"""How a release replaces the serving one: the strategies, the rolling batches and their on-host record,
the router change, and what clients see meanwhile."""
