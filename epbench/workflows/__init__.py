"""Workflows that combine the harness (measuring) and the reports (judging).

compare-commits, calibrate and validate each run the runner and then judge what it
measured; they sit above both, so neither harness nor reports imports the other.
"""
