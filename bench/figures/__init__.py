"""One module per figure group; each runs in its own process (`python -m bench.figures.<name>`)
and writes its figures as JSON, so one group's imports, mocks or failure never touch another's."""
