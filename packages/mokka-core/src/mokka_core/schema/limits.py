"""Bounds the profile models and the node's writers share, importable without pydantic (the ctl uses them)."""

#: the Xid events a GPU keeps, a ring buffer as the driver's (the state file's event list holds as many);
#: older ones are dropped and counted in ``xid_events_dropped``
MAX_XID_EVENTS = 256
