"""`kl-bitexact explore`: aimed workloads against a server, shrunk to a suite that fails.

geometry.py reads what the server says of its cache (page size, track interval, ...);
workload.py and strategy.py describe and generate workloads aimed at those boundaries
(pure: no network, no processes); execute.py sends one through an engine adapter
(run/engines) and checks every generated token against an uncached replay; search.py
drives Hypothesis's generation and shrinker under a time budget; handback.py writes the
smallest failing workload as a suite file `kl-bitexact run` runs.
"""
