"""Bench campaigns: a plan of (site, configs, device kinds) items, run on a Ray cluster and
merged into one freeze (see docs/campaigns.md)."""

#: rows per site besides the pick, as `emmy run --bench --max-rows`
DEFAULT_MAX_ROWS = 32
#: tries of an item whose worker died, after its first
DEFAULT_RETRIES = 2
