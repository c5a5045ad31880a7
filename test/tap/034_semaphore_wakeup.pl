
# A semaphore waiter must never miss its wake-up.  The head waiter lists the
# leases, and then sets a watch on them: a lease that went between the two
# was never heard of, and the waiter waited for good (one round in about a
# thousand; once in CI, 5 minutes).  Here, hundreds of times: one permit of
# two held on node_a for the whole test, the other taken on node_b, a waiter
# on node_a, and node_b's holder releasing (or disconnecting) after a random
# instant of up to 3 ms, around the waiter's listing.  Every waiter must be
# granted, well within 5 s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

use ZklockTest;

my $rounds = 400;
my $zk = start_zk();
my ($node_a, $node_b) = map { zk_node($_, $zk) } qw(node_a node_b);
$node_a->safe_psql('postgres', 'CREATE EXTENSION dblink');

my $keeper = session($node_a, 'keeper');
$keeper->query_safe(q{SELECT zk_semaphore_acquire('uploads', 2)});

my $port_b = $node_b->port;
my $host_b = $node_b->host;
$node_a->safe_psql('postgres', qq{
CREATE TABLE rounds (i int, granted boolean, waited_ms float8);
CREATE PROCEDURE wake_rounds(n int) LANGUAGE plpgsql AS \$\$
DECLARE
  t0 timestamptz;
  ok boolean;
  conn text := 'host=$host_b port=$port_b dbname=postgres';
BEGIN
  PERFORM dblink_connect('b', conn);
  FOR i IN 1..n LOOP
    -- The second permit, on node_b.
    PERFORM * FROM dblink('b', \$q\$SELECT zk_semaphore_acquire('uploads', 2)\$q\$) AS t(r boolean);
    -- Its holder lets go (every third round by disconnecting) a moment later.
    IF i % 3 = 0 THEN
      PERFORM dblink_send_query('b', \$q\$SELECT pg_sleep(random() * 0.003), pg_terminate_backend(pg_backend_pid())\$q\$);
    ELSE
      PERFORM dblink_send_query('b', \$q\$SELECT pg_sleep(random() * 0.003), zk_semaphore_release('uploads')\$q\$);
    END IF;
    t0 := clock_timestamp();
    ok := zk_semaphore_acquire('uploads', 2, 5000);
    INSERT INTO rounds VALUES (i, ok, extract(epoch FROM clock_timestamp() - t0) * 1000);
    IF i % 3 = 0 THEN
      PERFORM dblink_disconnect('b');
      PERFORM dblink_connect('b', conn);
    ELSE
      PERFORM * FROM dblink_get_result('b') AS t(s text, r boolean);
      PERFORM * FROM dblink_get_result('b') AS t(s text, r boolean);
    END IF;
    IF ok THEN
      PERFORM zk_semaphore_release('uploads');
    END IF;
    COMMIT;
  END LOOP;
  PERFORM dblink_disconnect('b');
END \$\$});

my ($ret, $out, $err) = $node_a->psql('postgres', "CALL wake_rounds($rounds)");
is($ret, 0, "$rounds rounds ran") or diag $err;
my ($granted, $slowest, $median) = split /\|/, $node_a->safe_psql('postgres', q{
SELECT count(*) FILTER (WHERE granted), round(max(waited_ms)::numeric, 1),
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY waited_ms))::numeric, 2)
  FROM rounds});
is($granted, $rounds, 'every waiter was granted');
cmp_ok($slowest, '<', 5000, 'none waited out its 5 s');
note "granted $granted of $rounds; waited $median ms at the median, $slowest ms at most";
$keeper->query_safe(q{SELECT zk_semaphore_release('uploads')});
$keeper->quit;

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
