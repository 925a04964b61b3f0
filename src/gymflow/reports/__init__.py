"""The HTML reports: a run's results laid out (`sections`, over the store's
`queries.report_views`), rendered from Jinja templates (`render`), charts, trajectories, the
history pages, and serving them (`serving`).

Cut-off: reads results and stores, writes HTML; no Prefect. Tier 4."""

__tier__ = 4

__all__ = ["history", "render", "sections", "serving", "stamp"]
