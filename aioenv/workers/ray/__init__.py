"""The Ray worker: the parent's half (``_worker``, ``_host``, ``_calls``, ``_channel``)
beside the actor it starts (``_actor``, which imports only the env side). Nothing here
imports ray when imported: ray is imported on first use.
"""
