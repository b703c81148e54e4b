"""The top layer: the click group, its shared options and every command.

Nothing in the project imports it. A command parses its options, calls one library
or workflow function with keyword arguments, and maps the result to an exit code.
"""
