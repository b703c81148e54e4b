"""The history, a wing of reports: the store, its series and change points, its page.

store (backends, migrations, runs), db (URLs and the backends' connections), changes
(series, detection, the base-commit report), changepoints (e-divisive means),
documents (`history list/show --format json`), page (the HTML report of a store). The
rest of reports does not import the history.
"""
