"""The HTML reports: views of a run's results (`views`, `sections`), rendered from Jinja
templates (`render`), charts, trajectories, the history pages, and serving them (`serving`).

Cut-off: reads results and stores, writes HTML; no Prefect. Tier 4."""

__tier__ = 4

__all__ = ["history", "render", "sections", "serving", "stamp"]
