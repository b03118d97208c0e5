"""Collecting with a policy: ``collect`` and the ``Collector`` drive a pool until a quota
of transitions or episodes is met; ``collect_groups`` plays each task a number of times and
hands out each task's group as soon as it ends.
"""
