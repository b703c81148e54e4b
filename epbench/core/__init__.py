"""The bottom layer: errors with their exit codes, the cache root, the results file.

It imports nothing else of the project, so every other layer may use it.
"""
