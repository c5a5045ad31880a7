/*
 * CuratorBarrier: a member of a barrier with Apache Curator, for zklock's
 * interop test of barriers (test/tap/078_barrier_interop.pl).
 *
 *   java -cp /usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar \
 *       test/interop/CuratorBarrier.java HOSTS PATH [LIFETIME_SECONDS]
 *
 * Connects, prints "ready", then runs the commands read from stdin, one at
 * a time, each answered by one line (times are epoch milliseconds):
 *
 *   enter PARTIES [MS]   a new DistributedDoubleBarrier(PATH, PARTIES); its
 *                        enter(), or enter(MS): "entered true|false <time>"
 *   leave [MS]           that barrier's leave(), or leave(MS):
 *                        "left true|false <time>"
 *   close                DistributedBarrier(PATH).setBarrier(): "closed <time>"
 *   open                 DistributedBarrier(PATH).removeBarrier(): "opened <time>"
 *   wait [MS]            DistributedBarrier(PATH).waitOnBarrier(), or with
 *                        MS: "passed true|false <time>"
 *   quit                 close the client (its member node, if any, goes
 *                        with its session) and exit 0
 *
 * Errors go to stderr with a non-zero exit: 2 for bad usage, 1 for anything
 * else, 3 if the ZooKeeper session was lost, 4 when LIFETIME_SECONDS
 * (default 300) have passed: it never outlives a test that forgot it.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.barriers.DistributedBarrier;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;

public class CuratorBarrier
{
	private static final int SESSION_TIMEOUT_MS = 4000;
	private static final int CONNECT_TIMEOUT_MS = 15000;

	private static void usage(String why)
	{
		System.err.println("CuratorBarrier: " + why);
		System.err.println("usage: CuratorBarrier HOSTS PATH [LIFETIME_SECONDS]");
		System.exit(2);
	}

	private static synchronized void say(String line)
	{
		System.out.println(line);
		System.out.flush();
	}

	private static long now()
	{
		return System.currentTimeMillis();
	}

	public static void main(String[] args) throws Exception
	{
		if (args.length < 2 || args.length > 3)
			usage("wrong number of arguments");
		String hosts = args[0], path = args[1];
		double lifetime = args.length == 3 ? Double.parseDouble(args[2]) : 300;
		if (!path.startsWith("/"))
			usage("PATH must be absolute");

		Thread watchdog = new Thread(() -> {
			try
			{
				Thread.sleep((long) (lifetime * 1000));
			}
			catch (InterruptedException e)
			{
				return;
			}
			System.err.println("CuratorBarrier: lifetime over");
			Runtime.getRuntime().halt(4);
		});
		watchdog.setDaemon(true);
		watchdog.start();

		CuratorFramework client = CuratorFrameworkFactory.newClient(
			hosts, SESSION_TIMEOUT_MS, CONNECT_TIMEOUT_MS, new RetryNTimes(3, 500));
		client.start();
		if (!client.blockUntilConnected(CONNECT_TIMEOUT_MS, TimeUnit.MILLISECONDS))
			throw new IllegalStateException("could not connect to " + hosts);
		client.getConnectionStateListenable().addListener((c, state) -> {
			if (state == ConnectionState.LOST)
			{
				System.err.println("CuratorBarrier: ZooKeeper session lost");
				Runtime.getRuntime().halt(3);
			}
		});
		say("ready");

		BufferedReader in = new BufferedReader(
			new InputStreamReader(System.in, StandardCharsets.UTF_8));
		DistributedDoubleBarrier barrier = null;
		DistributedBarrier gate = new DistributedBarrier(client, path);
		String line;
		while ((line = in.readLine()) != null)
		{
			String[] w = line.trim().split("\\s+");

			switch (w[0])
			{
				case "enter":
					barrier = new DistributedDoubleBarrier(client, path, Integer.parseInt(w[1]));
					if (w.length > 2)
						say("entered " + barrier.enter(Long.parseLong(w[2]), TimeUnit.MILLISECONDS) + " " + now());
					else
					{
						barrier.enter();
						say("entered true " + now());
					}
					break;
				case "leave":
					if (barrier == null)
						usage("leave before enter");
					if (w.length > 1)
						say("left " + barrier.leave(Long.parseLong(w[1]), TimeUnit.MILLISECONDS) + " " + now());
					else
					{
						barrier.leave();
						say("left true " + now());
					}
					break;
				case "close":
					gate.setBarrier();
					say("closed " + now());
					break;
				case "open":
					gate.removeBarrier();
					say("opened " + now());
					break;
				case "wait":
					if (w.length > 1)
						say("passed " + gate.waitOnBarrier(Long.parseLong(w[1]), TimeUnit.MILLISECONDS) + " " + now());
					else
					{
						gate.waitOnBarrier();
						say("passed true " + now());
					}
					break;
				case "quit":
					client.close();
					System.exit(0);
					break;
				default:
					usage("unknown command " + w[0]);
			}
		}
		client.close();
	}
}
