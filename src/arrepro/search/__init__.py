"""The learning-rate search: its protocol (a pure function of the results so far), its thresholds,
its rounds as files the workflow runs, its plans and decision files, and the protocol checked
against the literal grid.
"""
