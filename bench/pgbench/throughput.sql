-- One uncontended cycle of a lock of this client's own, for the aggregate
-- throughput of many backends (bench.py, bench_throughput).
SELECT zk_lock_acquire('bench-tp-' || current_setting('cluster_name') || '-' || :client_id);
SELECT zk_lock_release('bench-tp-' || current_setting('cluster_name') || '-' || :client_id);
