-- pg_advisory_lock for scale: the same cycle, without leaving the node.
SELECT pg_advisory_lock(hashtext('bench-cycle'));
SELECT pg_advisory_unlock(hashtext('bench-cycle'));
