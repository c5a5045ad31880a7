/* zklock--1.1--1.2.sql */

\echo Use "ALTER EXTENSION zklock UPDATE TO '1.2'" to load this file. \quit

-- The views go to the same roles as the functions behind them (PUBLIC):
-- before 1.2 only superusers could read them.
GRANT SELECT ON zk_locks, zk_cluster_locks, zk_lock_stats, zk_session_stats
    TO PUBLIC;
