/*
 * node_info.h
 *	  The JSON document a zklock node carries, naming its owner.
 */
#ifndef ZKLOCK_NODE_INFO_H
#define ZKLOCK_NODE_INFO_H

#include "lib/stringinfo.h"
#include "utils/timestamp.h"

/* What node_info_parse found; text fields point into parser memory. */
typedef struct NodeInfo
{
	bool		valid;			/* a JSON object jsonb would accept */
	char	   *cluster_name;
	char	   *host;
	int32		port;
	bool		has_port;
	int32		pid;
	bool		has_pid;
	char	   *database;
	char	   *user;
	char	   *application_name;
	TimestampTz requested_at;
	bool		has_requested_at;
	char	   *mode;
	TimestampTz release_requested_at;	/* written back by the holder */
	bool		has_release_requested_at;
	/* In a published wait (deadlock.c): the lock, our node and its czxid. */
	char	   *name;
	char	   *lock;
	char	   *node;
	int64		czxid;
	bool		has_czxid;
	/* In a barrier member's node: the parties it entered for. */
	int32		parties;
	bool		has_parties;
} NodeInfo;

extern void node_info_append_owner(StringInfo buf);
extern char *node_info_json(const char *mode, int permits);
extern char *node_info_barrier_json(const char *mode, int parties);
extern bool node_info_parse(const char *data, int len, NodeInfo *info);
extern char *node_info_owner(const NodeInfo *info);
extern void node_info_text_column(Datum *values, bool *nulls, int col,
								  const char *text);
extern void node_info_owner_columns(const NodeInfo *info, Datum *values,
									bool *nulls, int col);

#endif							/* ZKLOCK_NODE_INFO_H */
