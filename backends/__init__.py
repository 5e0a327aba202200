"""Store backends for caveman-batch, loaded lazily by URL scheme.

A leaf package: it imports only caveman_batch's public `store` and `errors` modules.
"""
