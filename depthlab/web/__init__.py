"""The lesson page: a local FastAPI server (app.py) over the probes (compute.py),
exported run data (runs.py) and a static HTML/JS page (static/); export.py writes
a self-contained copy that opens from disk."""
