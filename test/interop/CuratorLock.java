/*
 * CuratorLock: take a lock with Apache Curator, for zklock's interop tests.
 *
 *   java -cp /usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar \
 *       test/interop/CuratorLock.java HOSTS PATH KIND ACTION [SECONDS]
 *
 * KIND    mutex  InterProcessMutex(PATH)
 *         read   InterProcessReadWriteLock(PATH).readLock()
 *         write  InterProcessReadWriteLock(PATH).writeLock()
 * ACTION  try          acquire without waiting; print "acquired" or "busy",
 *                      release, exit 0
 *         hold SECONDS print "started", acquire (waiting without limit),
 *                      print "acquired <epoch ms>", hold until SECONDS have
 *                      passed, stdin reaches EOF or a line "release" is read,
 *                      release, print "released <epoch ms>", exit 0
 *         revocable SECONDS
 *                      (mutex only) like hold, but the lock is made
 *                      revocable first (InterProcessMutex.makeRevocable):
 *                      when another client asks its holder to let go
 *                      (Curator's convention: the bytes "__REVOKE__" written
 *                      into the holder's node, as Revoker.attemptRevoke or
 *                      zklock's zk_lock_request_release do), the listener
 *                      prints "revoke-requested <epoch ms>" and the lock is
 *                      released as on a line "release"
 *         revoke       (mutex only) ask the current holder of PATH to let
 *                      go with Curator's own API: the first of
 *                      InterProcessMutex(PATH).getParticipantNodes() (in
 *                      queue order) is given to Revoker.attemptRevoke; print
 *                      "revoked <node path>", or "none" if nobody holds or
 *                      waits, exit 0
 *
 * Lines on stdout are flushed at once.  Errors go to stderr with a non-zero
 * exit: 2 for bad usage, 1 for anything else, 3 if the ZooKeeper session was
 * lost while holding or waiting (the lock can no longer be trusted).
 *
 * Debian's Curator jars name their dependencies (curator-framework,
 * curator-client, zookeeper, guava, slf4j-api, ...) in their manifests'
 * Class-Path, so curator-recipes.jar alone is enough on the class path;
 * slf4j-nop.jar keeps SLF4J quiet.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.KeeperException;

public class CuratorLock
{
	private static final int SESSION_TIMEOUT_MS = 4000;
	private static final int CONNECT_TIMEOUT_MS = 15000;

	private static void usage(String why)
	{
		System.err.println("CuratorLock: " + why);
		System.err.println("usage: CuratorLock HOSTS PATH mutex|read|write try|hold SECONDS");
		System.err.println("       CuratorLock HOSTS PATH mutex revocable SECONDS|revoke");
		System.exit(2);
	}

	private static synchronized void say(String line)
	{
		System.out.println(line);
		System.out.flush();
	}

	public static void main(String[] args)
	{
		if (args.length < 4)
			usage("too few arguments");
		String hosts = args[0], path = args[1], kind = args[2], action = args[3];
		double seconds = 0;
		if (!path.startsWith("/"))
			usage("PATH must be absolute");
		if ((action.equals("revocable") || action.equals("revoke")) &&
			!kind.equals("mutex"))
			usage(action + " needs KIND mutex (only InterProcessMutex is Revocable)");
		if (action.equals("hold") || action.equals("revocable"))
		{
			if (args.length != 5)
				usage(action + " needs SECONDS");
			try
			{
				seconds = Double.parseDouble(args[4]);
			}
			catch (NumberFormatException e)
			{
				usage("bad SECONDS: " + args[4]);
			}
		}
		else if (action.equals("try") || action.equals("revoke"))
		{
			if (args.length != 4)
				usage(action + " takes no argument");
		}
		else
			usage("unknown ACTION " + action);

		CuratorFramework client = CuratorFrameworkFactory.newClient(
			hosts, SESSION_TIMEOUT_MS, CONNECT_TIMEOUT_MS, new RetryNTimes(3, 500));
		int status = 1;
		try
		{
			client.start();
			if (!client.blockUntilConnected(CONNECT_TIMEOUT_MS, TimeUnit.MILLISECONDS))
				throw new IllegalStateException("could not connect to " + hosts);

			InterProcessLock lock;
			switch (kind)
			{
				case "mutex":
					lock = new InterProcessMutex(client, path);
					break;
				case "read":
					lock = new InterProcessReadWriteLock(client, path).readLock();
					break;
				case "write":
					lock = new InterProcessReadWriteLock(client, path).writeLock();
					break;
				default:
					usage("unknown KIND " + kind);
					return;
			}

			/* A lost session means a lost lock (or queue place): say so, stop. */
			client.getConnectionStateListenable().addListener((c, state) -> {
				if (state == ConnectionState.LOST)
				{
					say("lost " + System.currentTimeMillis());
					System.err.println("CuratorLock: ZooKeeper session lost");
					Runtime.getRuntime().halt(3);
				}
			});

			if (action.equals("try"))
			{
				if (lock.acquire(0, TimeUnit.MILLISECONDS))
				{
					say("acquired");
					lock.release();
				}
				else
					say("busy");
			}
			else if (action.equals("revoke"))
			{
				/* The holder is the first participant, in queue order. */
				Collection<String> nodes;
				try
				{
					nodes = ((InterProcessMutex) lock).getParticipantNodes();
				}
				catch (KeeperException.NoNodeException e)
				{
					nodes = java.util.List.of();
				}
				String first = nodes.stream().findFirst().orElse(null);
				if (first == null)
					say("none");
				else
				{
					Revoker.attemptRevoke(client, first);
					say("revoked " + first);
				}
			}
			else
			{
				CountDownLatch letGo = new CountDownLatch(1);
				Thread stdin = new Thread(() -> {
					try (BufferedReader in = new BufferedReader(
							 new InputStreamReader(System.in, StandardCharsets.UTF_8)))
					{
						String line;
						while ((line = in.readLine()) != null)
							if (line.trim().equals("release"))
								break;
					}
					catch (Exception e)
					{
						/* treat like EOF */
					}
					letGo.countDown();
				});
				stdin.setDaemon(true);

				/*
				 * Asked to let go: the lock must be released by the thread
				 * that acquired it, so the listener (on ZooKeeper's event
				 * thread) only lets the main thread go on, as "release" does.
				 */
				if (action.equals("revocable"))
					((InterProcessMutex) lock).makeRevocable(forLock -> {
						say("revoke-requested " + System.currentTimeMillis());
						letGo.countDown();
					});

				say("started");
				lock.acquire();
				say("acquired " + System.currentTimeMillis());
				stdin.start();
				letGo.await((long) (seconds * 1000), TimeUnit.MILLISECONDS);
				lock.release();
				say("released " + System.currentTimeMillis());
			}
			status = 0;
		}
		catch (Exception e)
		{
			System.err.println("CuratorLock: " + e);
		}
		finally
		{
			client.close();
		}
		System.exit(status);
	}
}
