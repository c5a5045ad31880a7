-- SQLSTATEs of bad input.
SELECT sqlstate_of($$SELECT zk_lock_acquire(NULL)$$);
-- The readers take NULL for every lock below zklock.root (the view
-- zk_cluster_locks is zk_lock_holders(NULL)), not as bad input.
SELECT zk_lock_acquire('null-reads-a') AND zk_lock_acquire_shared('null-reads-b') AS held;
SELECT lock_name, mode, holding FROM zk_lock_queue(NULL)
  WHERE lock_name LIKE 'null-reads-%' ORDER BY lock_name;
SELECT lock_name, mode, pid = pg_backend_pid() AS mine FROM zk_lock_holders(NULL)
  WHERE lock_name LIKE 'null-reads-%' ORDER BY lock_name;
SELECT zk_lock_release('null-reads-a') AND zk_lock_release_shared('null-reads-b') AS released;
SELECT sqlstate_of($$SELECT zk_lock_acquire('')$$);
SELECT sqlstate_of($$SELECT zk_lock_acquire(repeat('y', 300))$$);
SELECT sqlstate_of($$SELECT zk_lock_acquire('neg', -1)$$);
SELECT sqlstate_of($$SELECT zk_lock_xact_acquire('neg', -5)$$);
SELECT zk_lock_acquire('neg', -1);

-- The timeout is an integer: a quoted one resolves to it, an interval is
-- passed as milliseconds, and one beyond integer's range is an error.
SELECT zk_lock_acquire('timeout-forms', '5000') AND zk_lock_release('timeout-forms') AS quoted,
       zk_lock_acquire('timeout-forms', (extract(epoch FROM interval '5 s') * 1000)::integer)
         AND zk_lock_release('timeout-forms') AS from_interval;
SELECT sqlstate_of($$SELECT zk_lock_acquire('timeout-forms', 2147483648)$$);

-- Settings are checked when set.  The server's session settings are set in
-- the configuration (reload to change them), never in a session: 55P02.
SET zklock.hosts = '127.0.0.1:2181';
SET zklock.session_timeout = 20000;
SET zklock.auth = 'user:secret';
SET zklock.log_level = 'debug';
-- What the configuration may hold is checked as ALTER SYSTEM writes it.
ALTER SYSTEM SET zklock.hosts = '';
ALTER SYSTEM SET zklock.hosts = 'garbage';
ALTER SYSTEM SET zklock.hosts = '127.0.0.1:0';
ALTER SYSTEM SET zklock.hosts = '127.0.0.1:70000';
ALTER SYSTEM SET zklock.hosts = '127.0.0.1:2181,';
ALTER SYSTEM SET zklock.hosts = '127.0.0.1:2181/bad//chroot';
SET zklock.root = 'zklock';
SET zklock.root = '/';
SET zklock.root = '/zookeeper/x';
SET zklock.root = '/a/';
SET zklock.root = '/a/../b';
SET zklock.absolute_paths = 'relative';
SET zklock.absolute_paths = '/';
SET zklock.absolute_paths = '/zookeeper';
SET zklock.absolute_paths = '/ok, /zookeeper/quota';
SET zklock.absolute_paths = '//a';
SET zklock.absolute_paths = '/a/';
SET zklock.absolute_paths = '/a/./b';
SET zklock.absolute_paths = '/a,,/b';
SET zklock.absolute_paths = '/a,';
SET zklock.absolute_paths = ',/a';
SET zklock.absolute_paths = '/a, b';
-- Blanks around entries do not count; a list given as several values is one.
SET zklock.absolute_paths = ' /a , /b/c ';
SHOW zklock.absolute_paths;
SET zklock.absolute_paths = '/a', '/b/c';
SHOW zklock.absolute_paths;
SET zklock.absolute_paths = '';
RESET zklock.absolute_paths;
-- Out of range: 22023.  The server's message shows the range with its unit
-- on newer majors ("1000 ms .. 600000 ms"), without on 15: only the SQLSTATE
-- is shown, and the range is read from pg_settings.
\set VERBOSITY sqlstate
ALTER SYSTEM SET zklock.session_timeout = 10;
\set VERBOSITY default
SELECT split_part(sqlstate_of('SET zklock.connect_timeout = 0'), ' (', 1) AS refused;
SELECT name, unit, min_val, max_val FROM pg_settings
 WHERE name IN ('zklock.session_timeout', 'zklock.connect_timeout') ORDER BY name;
SET zklock.on_lost_lock = 'ignore';
SET zklock.on_lost_lock = 'warning';
RESET zklock.on_lost_lock;
SHOW zklock.auth;
-- A huge timeout is fine; a free lock is granted at once.
SELECT zk_lock_acquire('huge', 2147483647), zk_lock_release('huge');

-- Ordinary users cannot point zklock elsewhere.
CREATE ROLE zklock_plain_user;
SET ROLE zklock_plain_user;
SET zklock.hosts = '127.0.0.1:2181';
SET zklock.root = '/elsewhere';
SET zklock.connect_timeout = 1000;
SET zklock.auth = 'someone:secret';
SET zklock.absolute_paths = '/anywhere';
-- Nor read the credentials: 42501.  Newer majors word the refusal
-- differently ("permission denied to examine ..." and a DETAIL), so only
-- what every major says is shown.
SELECT split_part(sqlstate_of('SHOW zklock.auth'), ':', 1) AS sqlstate,
       sqlstate_of('SHOW zklock.auth') LIKE '% to examine "zklock.auth"' AS names_the_setting;
SELECT count(*) FROM pg_settings WHERE name = 'zklock.auth';
SET zklock.on_lost_lock = 'warning';
RESET ROLE;
DROP ROLE zklock_plain_user;

-- An unreachable ZooKeeper, an unresolvable host name, a missing chroot and
-- malformed credentials are server-wide: TAP test 039_server_session.

-- Waits end on statement_timeout and lock_timeout, leaving nothing behind.
SELECT in_other_session($$SELECT zk_lock_acquire('waits')::text$$) AS other_holds;
SET statement_timeout = 300;
SELECT zk_lock_acquire('waits');
RESET statement_timeout;
SET lock_timeout = 300;
SELECT zk_lock_acquire('waits');
SELECT zk_lock_xact_acquire('waits');
RESET lock_timeout;
-- A timeout argument wins over a longer lock_timeout, and returns false.
SET lock_timeout = 5000;
SELECT zk_lock_acquire('waits', 200);
RESET lock_timeout;
SELECT * FROM my_locks;
SELECT in_other_session($$SELECT zk_lock_release('waits')::text$$) AS other_released;
-- Had any of the waits above left a node behind, this would be false.
SELECT in_new_session($$SELECT zk_lock_try_acquire('waits')::text$$) AS free_again;
SELECT dblink_disconnect('other');
