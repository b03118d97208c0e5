"""Collecting with a policy: ``collect`` and the ``Collector`` drive a pool until a quota
of transitions or episodes is met.
"""
