"""Evidence: the content-keyed store, the keys, and the workspace that holds it and the reports.
"""
