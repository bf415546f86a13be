"""The directory a launched server finds first on its PYTHONPATH: it holds only the probe,
`sitecustomize.py` (see that module; docs/reach.md says why this convention)."""
