"""Pools: many workers behind one ``get_state``. ``WorkerPool`` owns its helpers (the
roster, the sending and receiving sides, remote control, rollouts, the space check);
``make_pool`` builds workers and a pool in one call.
"""
