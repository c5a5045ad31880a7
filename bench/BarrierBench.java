/*
 * BarrierBench: Curator's DistributedDoubleBarrier side of bench/barriers.py
 * (issue 49, item 7).
 *
 *   java -cp /usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar \
 *       bench/BarrierBench.java HOSTS PATH MEMBERS ROUNDS
 *
 * MEMBERS members, each with a client of its own (its own ZooKeeper session
 * and connection, as separate processes would have), in threads.  Each
 * round, on PATH/r<round>: all members but the last enter and wait; once
 * their nodes are there (and a moment more, for them to be waiting), the
 * last one enters.  Prints, per round, "round R <ms> <ms>": the time from
 * the last member's arrival (its call to enter) to the last, and to the
 * median, member's return from enter.  Then all leave.
 */

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.retry.RetryNTimes;

public class BarrierBench
{
	public static void main(String[] args) throws Exception
	{
		if (args.length != 4)
		{
			System.err.println("usage: BarrierBench HOSTS PATH MEMBERS ROUNDS");
			System.exit(2);
		}
		String hosts = args[0], path = args[1];
		int members = Integer.parseInt(args[2]), rounds = Integer.parseInt(args[3]);

		List<CuratorFramework> clients = new ArrayList<>();
		for (int i = 0; i <= members; i++)
		{
			CuratorFramework c = CuratorFrameworkFactory.newClient(hosts, 10000, 15000,
																   new RetryNTimes(3, 500));
			c.start();
			if (!c.blockUntilConnected(15, TimeUnit.SECONDS))
				throw new IllegalStateException("could not connect to " + hosts);
			clients.add(c);
		}
		CuratorFramework checker = clients.get(members);

		for (int r = 1; r <= rounds; r++)
		{
			String at = path + "/r" + r;
			long[] returned = new long[members];
			DistributedDoubleBarrier[] barriers = new DistributedDoubleBarrier[members];
			Thread[] threads = new Thread[members];

			for (int i = 0; i < members; i++)
			{
				final int m = i;

				barriers[m] = new DistributedDoubleBarrier(clients.get(m), at, members);
				threads[m] = new Thread(() -> {
					try
					{
						if (!barriers[m].enter(60, TimeUnit.SECONDS))
							throw new IllegalStateException("enter timed out");
						returned[m] = System.nanoTime();
					}
					catch (Exception e)
					{
						e.printStackTrace();
						System.exit(1);
					}
				});
			}
			for (int i = 0; i < members - 1; i++)
				threads[i].start();
			while (checker.checkExists().forPath(at) == null ||
				   checker.getChildren().forPath(at).size() < members - 1)
				Thread.sleep(2);
			Thread.sleep(200);
			long arrival = System.nanoTime();

			threads[members - 1].start();
			for (Thread t : threads)
				t.join();
			long[] after = new long[members];
			for (int i = 0; i < members; i++)
				after[i] = returned[i] - arrival;
			Arrays.sort(after);
			System.out.printf("round %d %.3f %.3f%n", r, after[members - 1] / 1e6,
							  after[members / 2] / 1e6);
			System.out.flush();

			for (int i = 0; i < members; i++)
			{
				final int m = i;

				threads[m] = new Thread(() -> {
					try
					{
						barriers[m].leave(60, TimeUnit.SECONDS);
					}
					catch (Exception e)
					{
						e.printStackTrace();
						System.exit(1);
					}
				});
				threads[m].start();
			}
			for (Thread t : threads)
				t.join();
		}
		for (CuratorFramework c : clients)
			c.close();
	}
}
