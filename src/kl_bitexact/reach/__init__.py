"""Reach: which of the functions a test names ran while it ran (docs/reach.md).

`probe/` is what runs inside the server (a `sitecustomize`, the standard library only);
`probe_dir.py` prepares a launch's probe directory and marks test boundaries; `hits.py`
reads what the probe wrote back into typed values; `changes.py` the PR's changed functions.
"""
