/*
 * sql_functions.h
 *	  What the SQL-callable functions share with the rest of zklock.
 */
#ifndef ZKLOCK_SQL_FUNCTIONS_H
#define ZKLOCK_SQL_FUNCTIONS_H

#include "fmgr.h"

extern char *zklock_name_arg(FunctionCallInfo fcinfo, int argno);
extern int	zklock_timeout_arg(FunctionCallInfo fcinfo, int argno);
extern int	zklock_release_all_session_locks(void);

#endif							/* ZKLOCK_SQL_FUNCTIONS_H */
