"""The operations: optimize, purge and auto compaction, each one path through the layers (``pipeline``).

The front ends (the CLI, the dbt bridge, the ``python/`` jobs) call only this layer; ``api`` is its
public face. Nothing is imported here, so importing the package stays cheap.
"""
