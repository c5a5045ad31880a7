/*
 * node_info.c
 *	  The JSON document a zklock node carries, naming its owner: written when
 *	  a node is created, read back on any PostgreSQL node without trusting it,
 *	  and shown in the views' owner columns.
 *
 * What is read comes from ZooKeeper, where any client may have written
 * anything: another server's encoding, text that is not JSON (Curator stores
 * an address), JSON that jsonb would reject (\u0000, huge exponents), fields
 * of the wrong type.  Reading never raises an error: the document is checked
 * against the database encoding, parsed with the server's JSON lexer, and
 * each field this module knows is taken only if it has the expected type and
 * range.  Anything else reads as absent (SQL NULL).
 */
#include "postgres.h"

#include <ctype.h>
#include <unistd.h>

#include "commands/dbcommands.h"
#include "common/int.h"
#include "common/jsonapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgtime.h"
#include "postmaster/postmaster.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "node_info.h"

/* ---- writing ---- */

/* Append the fields that name this backend: who owns or waits. */
void
node_info_append_owner(StringInfo buf)
{
	static char *database = NULL;
	static char host[256];

	if (database == NULL)
	{
		char	   *name = get_database_name(MyDatabaseId);

		database = MemoryContextStrdup(TopMemoryContext, name ? name : "");
		if (gethostname(host, sizeof(host)) != 0)
			host[0] = '\0';
		host[sizeof(host) - 1] = '\0';
	}

	appendStringInfoString(buf, "\"cluster_name\":");
	escape_json(buf, cluster_name ? cluster_name : "");
	appendStringInfoString(buf, ",\"host\":");
	escape_json(buf, host);
	appendStringInfo(buf, ",\"port\":%d,\"pid\":%d,\"database\":",
					 PostPortNumber, MyProcPid);
	escape_json(buf, database);
	appendStringInfoString(buf, ",\"user\":");
	escape_json(buf, GetUserNameFromId(GetUserId(), false));
	appendStringInfoString(buf, ",\"application_name\":");
	escape_json(buf, application_name ? application_name : "");
}

/* The owner, the time, mode, and a count (count_name) if there is one. */
static char *
info_json(const char *mode, const char *count_name, int count)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	node_info_append_owner(&buf);
	appendStringInfoString(&buf, ",\"requested_at\":");
	escape_json(&buf, timestamptz_to_str(GetCurrentTimestamp()));
	appendStringInfo(&buf, ",\"mode\":\"%s\"", mode);
	if (count > 0)
		appendStringInfo(&buf, ",\"%s\":%d", count_name, count);
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/* The document stored in a lock node, so that anyone can see who holds. */
char *
node_info_json(const char *mode, int permits)
{
	return info_json(mode, "permits", permits);
}

/*
 * The document of a barrier's member node (mode "barrier", with the parties
 * it entered for) or a gate's node (mode "gate", parties 0): who entered,
 * who closed it.
 */
char *
node_info_barrier_json(const char *mode, int parties)
{
	return info_json(mode, "parties", parties);
}

/* ---- reading ---- */

typedef enum FieldType
{
	FIELD_TEXT,
	FIELD_INT32,
	FIELD_INT64,
	FIELD_TIMESTAMPTZ
} FieldType;

typedef struct FieldSpec
{
	const char *name;
	FieldType	type;
	size_t		offset;			/* of the value in NodeInfo */
	size_t		has_offset;		/* of its "present" flag; text: none */
} FieldSpec;

#define TEXT_FIELD(f) {#f, FIELD_TEXT, offsetof(NodeInfo, f), 0}
#define NUM_FIELD(f, t) {#f, t, offsetof(NodeInfo, f), offsetof(NodeInfo, has_##f)}

static const FieldSpec fields[] = {
	TEXT_FIELD(cluster_name),
	TEXT_FIELD(host),
	NUM_FIELD(port, FIELD_INT32),
	NUM_FIELD(pid, FIELD_INT32),
	TEXT_FIELD(database),
	TEXT_FIELD(user),
	TEXT_FIELD(application_name),
	NUM_FIELD(requested_at, FIELD_TIMESTAMPTZ),
	TEXT_FIELD(mode),
	NUM_FIELD(release_requested_at, FIELD_TIMESTAMPTZ),
	TEXT_FIELD(name),
	TEXT_FIELD(lock),
	TEXT_FIELD(node),
	NUM_FIELD(czxid, FIELD_INT64),
	NUM_FIELD(parties, FIELD_INT32),
};

typedef struct InfoParse
{
	NodeInfo   *info;
	int			depth;
	const FieldSpec *field;		/* the top-level field being read */
	bool		bad;			/* something jsonb would refuse */
} InfoParse;

/* A JSON number jsonb can store: its exponent within numeric's range. */
static bool
number_fits(const char *token)
{
	const char *e = strpbrk(token, "eE");
	long		exponent;

	/* numeric_in takes at most about 131,000 digits; no pid needs 1,000. */
	if (strlen(token) > 1000)
		return false;
	if (e == NULL)
		return true;
	errno = 0;
	exponent = strtol(e + 1, NULL, 10);
	return errno == 0 && exponent >= -1000 && exponent <= 1000;
}

/*
 * Deeper nesting than any document of ours is refused before parsing: the
 * server's JSON parser recurses once per level and raises "stack depth limit
 * exceeded" on a document nested deep enough.
 */
#define MAX_NESTING 32

/*
 * Can the server's lexer read this document without raising an error?  Not
 * if it nests deeper than MAX_NESTING, nor, in a database that is not UTF8,
 * if it has a \u escape beyond ASCII: before 16 the lexer converts those
 * with a function that raises an error for characters the database encoding
 * lacks (16 returns a parse error instead; we refuse them on every major
 * alike).
 */
static bool
lexer_safe(const char *data, int len)
{
	bool		utf8 = GetDatabaseEncoding() == PG_UTF8;
	bool		in_string = false;
	int			depth = 0;

	for (int i = 0; i < len; i++)
	{
		char		c = data[i];

		if (in_string)
		{
			if (c == '"')
				in_string = false;
			else if (c == '\\' && i + 1 < len)
			{
				/* \u0080 and above: not ASCII. */
				if (data[++i] == 'u' && !utf8 &&
					(i + 3 >= len || data[i + 1] != '0' || data[i + 2] != '0' ||
					 !(data[i + 3] >= '0' && data[i + 3] <= '7')))
					return false;
			}
		}
		else if (c == '"')
			in_string = true;
		else if (c == '{' || c == '[')
		{
			if (++depth > MAX_NESTING)
				return false;
		}
		else if (c == '}' || c == ']')
			depth--;
	}
	return true;
}

static bool
parse_int64(const char *token, int64 min, int64 max, int64 *out)
{
	char	   *end;
	long long	v;

	errno = 0;
	v = strtoll(token, &end, 10);
	if (errno != 0 || *end != '\0' || end == token || v < min || v > max)
		return false;
	*out = v;
	return true;
}

/*
 * "YYYY-MM-DD HH:MM:SS[.ffffff]+HH[:MM]", as timestamptz_to_str writes it
 * (ISO, whatever DateStyle), or with a "T" and "Z".  Parsed by hand, because
 * the server's own input functions raise errors.
 */
static bool
parse_timestamptz(const char *s, TimestampTz *out)
{
	struct pg_tm tm = {0};
	int			usec = 0;
	int			tz_h = 0;
	int			tz_m = 0;
	int			n = 0;
	int			sign = 1;
	const char *p;

	if (sscanf(s, "%4d-%2d-%2d%*1[ T]%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon,
			   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6 ||
		n != 19)
		return false;
	p = s + n;
	if (*p == '.')
	{
		int			digits = 0;

		for (p++; isdigit((unsigned char) *p); p++, digits++)
			if (digits < 6)
				usec = usec * 10 + (*p - '0');
		if (digits == 0)
			return false;
		for (; digits < 6; digits++)
			usec *= 10;
	}
	if (*p == 'Z')
		p++;
	else if (*p == '+' || *p == '-')
	{
		sign = *p == '-' ? -1 : 1;
		if (!isdigit((unsigned char) p[1]) || !isdigit((unsigned char) p[2]))
			return false;
		tz_h = (p[1] - '0') * 10 + (p[2] - '0');
		p += 3;
		if (*p == ':' && isdigit((unsigned char) p[1]) && isdigit((unsigned char) p[2]))
		{
			tz_m = (p[1] - '0') * 10 + (p[2] - '0');
			p += 3;
		}
	}
	else
		return false;
	if (*p != '\0' || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
		tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
		tm.tm_sec > 60 || tz_h > 15 || tz_m > 59)
		return false;
	/* Read as UTC, then moved by the offset east of UTC. */
	return tm2timestamp(&tm, usec, NULL, out) == 0 &&
		!pg_sub_s64_overflow(*out, (int64) sign * (tz_h * 3600 + tz_m * 60) * USECS_PER_SEC, out) &&
		IS_VALID_TIMESTAMP(*out);
}

static void
store_field(NodeInfo *info, const FieldSpec *f, char *token, JsonTokenType type)
{
	char	   *base = (char *) info;
	int64		v;

	switch (f->type)
	{
		case FIELD_TEXT:
			if (type == JSON_TOKEN_STRING)
				*(char **) (base + f->offset) = token;
			return;
		case FIELD_INT32:
			if (type != JSON_TOKEN_NUMBER ||
				!parse_int64(token, PG_INT32_MIN, PG_INT32_MAX, &v))
				return;
			*(int32 *) (base + f->offset) = (int32) v;
			break;
		case FIELD_INT64:
			if (type != JSON_TOKEN_NUMBER ||
				!parse_int64(token, PG_INT64_MIN, PG_INT64_MAX, &v))
				return;
			*(int64 *) (base + f->offset) = v;
			break;
		case FIELD_TIMESTAMPTZ:
			if (type != JSON_TOKEN_STRING ||
				!parse_timestamptz(token, (TimestampTz *) (base + f->offset)))
				return;
			break;
	}
	*(bool *) (base + f->has_offset) = true;
}

/* Objects and arrays alike: only the depth matters. */
static ZK_JSON_ACTION_RESULT
on_nest_start(void *state)
{
	((InfoParse *) state)->depth++;
	ZK_JSON_ACTION_OK;
}

static ZK_JSON_ACTION_RESULT
on_nest_end(void *state)
{
	((InfoParse *) state)->depth--;
	ZK_JSON_ACTION_OK;
}

static ZK_JSON_ACTION_RESULT
on_field_start(void *state, char *fname, bool isnull)
{
	InfoParse *ps = (InfoParse *) state;

	ps->field = NULL;
	if (ps->depth == 1)
		for (int i = 0; i < (int) lengthof(fields); i++)
			if (strcmp(fname, fields[i].name) == 0)
				ps->field = &fields[i];
	ZK_JSON_ACTION_OK;
}

static ZK_JSON_ACTION_RESULT
on_scalar(void *state, char *token, JsonTokenType type)
{
	InfoParse *ps = (InfoParse *) state;

	if (type == JSON_TOKEN_NUMBER && !number_fits(token))
		ps->bad = true;
	else if (ps->depth == 1 && ps->field != NULL)
		store_field(ps->info, ps->field, token, type);
	ps->field = NULL;
	ZK_JSON_ACTION_OK;
}

/*
 * Read a node's data into info.  True if it is a JSON object that jsonb
 * would accept, in the database encoding; the fields found are filled in,
 * the others left NULL or unset.  Never raises an error.
 */
bool
node_info_parse(const char *data, int len, NodeInfo *info)
{
	InfoParse	ps = {0};
	JsonSemAction sem = {0};
	JsonLexContext *lex;

	memset(info, 0, sizeof(*info));
	if (data == NULL || len <= 0 || data[0] != '{' ||
		memchr(data, '\0', len) != NULL ||
		!pg_verifymbstr(data, len, true) || !lexer_safe(data, len))
		return false;

	ps.info = info;
	sem.semstate = &ps;
	sem.object_start = on_nest_start;
	sem.object_end = on_nest_end;
	sem.array_start = on_nest_start;
	sem.array_end = on_nest_end;
	sem.object_field_start = on_field_start;
	sem.scalar = on_scalar;
	/* With escapes resolved: \u0000 and the like fail, as for jsonb. */
	lex = zk_json_lexer(data, len, GetDatabaseEncoding());
	info->valid = pg_parse_json(lex, &sem) == JSON_SUCCESS && !ps.bad;
	if (!info->valid)
	{
		NodeInfo	cleared = {0};

		*info = cleared;
	}
	return info->valid;
}

/*
 * How a backend is named in messages and in blocked_by: "<node>/<pid>",
 * the node being cluster_name@host:port, or either part alone where the
 * document has only that.  Both, because the members of one cluster (a
 * Patroni cluster) share their cluster_name, and several servers may share
 * a host.  NULL if the document names no backend.
 */
char *
node_info_owner(const NodeInfo *info)
{
	bool		named = info->cluster_name != NULL && info->cluster_name[0] != '\0';
	bool		placed = info->host != NULL && info->has_port;

	if (!info->has_pid || (!named && !placed))
		return NULL;
	if (named && placed)
		return psprintf("%s@%s:%d/%d", info->cluster_name, info->host,
						info->port, info->pid);
	if (named)
		return psprintf("%s/%d", info->cluster_name, info->pid);
	return psprintf("%s:%d/%d", info->host, info->port, info->pid);
}

/* ---- the views' columns ---- */

/* A text column, NULL for a NULL string. */
void
node_info_text_column(Datum *values, bool *nulls, int col, const char *text)
{
	if (text != NULL)
		values[col] = CStringGetTextDatum(text);
	else
		nulls[col] = true;
}

/*
 * The seven owner columns from col on: cluster_name, host (host:port), pid,
 * database, user, application_name and the time of the request, each NULL
 * where the document does not say.
 */
void
node_info_owner_columns(const NodeInfo *info, Datum *values, bool *nulls,
						int col)
{
	node_info_text_column(values, nulls, col, info->cluster_name);
	node_info_text_column(values, nulls, col + 1, info->host && info->has_port ?
						  psprintf("%s:%d", info->host, info->port) : NULL);
	values[col + 2] = Int32GetDatum(info->pid);
	nulls[col + 2] = !info->has_pid;
	node_info_text_column(values, nulls, col + 3, info->database);
	node_info_text_column(values, nulls, col + 4, info->user);
	node_info_text_column(values, nulls, col + 5, info->application_name);
	values[col + 6] = TimestampTzGetDatum(info->requested_at);
	nulls[col + 6] = !info->has_requested_at;
}
