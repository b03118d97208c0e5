"""What both sides of a worker say: the env protocol and gymnasium's adapter, a step's
record (``Step``, ``BatchStep``), the commands sent in place of actions, the messages
besides steps (rollout requests and their segments among them), seeds, infos in vector
form, the restart marker, gymnasium ids and the errors. The floor of the house: it imports
nothing else of aioenv.
"""
