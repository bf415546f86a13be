"""CI registration: which tests are registered to which suites, whether CI really runs them
(allowlists and workflows), the lint findings, their automatic fixes, and shard planning.

The core (scan, allowlists, workflows, lint, shard) takes text and values and returns values;
`repo.py` is the one place that reads a repository from disk and `fix.py` the one that writes.
"""
