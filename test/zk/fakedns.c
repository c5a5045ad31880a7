/*
 * fakedns.c
 *	  A stand-in for DNS in tests, loaded with LD_PRELOAD: host names under
 *	  ".zklock.test" are answered here, so that no test sends a query to a
 *	  real name server.  Every other name goes to the C library.
 *
 *	  gone*.zklock.test   does not resolve (EAI_NONAME), at once
 *	  slow*.zklock.test   does not resolve either, after ZKLOCK_FAKEDNS_SLOW_MS
 *	                      (default 30000) of waiting, as a dead name server does
 *	  lo*.zklock.test     resolves to 127.0.0.1
 *
 * With ZKLOCK_FAKEDNS_LOG set, each look-up of a test name appends the name
 * and the caller's pid to that file, so a test can count resolutions.
 *
 * Build: cc -shared -fPIC -o fakedns.so fakedns.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TEST_DOMAIN ".zklock.test"

typedef int (*getaddrinfo_fn) (const char *, const char *,
							   const struct addrinfo *, struct addrinfo **);

static int
is_test_name(const char *node)
{
	size_t		len = node ? strlen(node) : 0;
	size_t		dlen = strlen(TEST_DOMAIN);

	return len > dlen && strcmp(node + len - dlen, TEST_DOMAIN) == 0;
}

static void
log_lookup(const char *node)
{
	const char *path = getenv("ZKLOCK_FAKEDNS_LOG");
	char		line[512];
	int			fd;
	int			n;

	if (path == NULL)
		return;
	n = snprintf(line, sizeof(line), "%s %d\n", node, (int) getpid());
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0)
		return;
	if (write(fd, line, n) < 0)
		perror("fakedns: write");
	close(fd);
}

/* Sleep the whole time, through signals, as a resolver waiting on a socket. */
static void
sleep_ms(long ms)
{
	struct timespec left = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&left, &left) != 0 && errno == EINTR)
		;
}

int
getaddrinfo(const char *node, const char *service,
			const struct addrinfo *hints, struct addrinfo **res)
{
	static getaddrinfo_fn real = NULL;

	if (real == NULL)
		real = (getaddrinfo_fn) dlsym(RTLD_NEXT, "getaddrinfo");
	if (!is_test_name(node))
		return real(node, service, hints, res);

	log_lookup(node);
	if (strncmp(node, "lo", 2) == 0)
		return real("127.0.0.1", service, hints, res);
	if (strncmp(node, "slow", 4) == 0)
	{
		const char *ms = getenv("ZKLOCK_FAKEDNS_SLOW_MS");

		sleep_ms(ms ? atol(ms) : 30000);
	}
	return EAI_NONAME;
}
