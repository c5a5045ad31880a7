/*
 * session_file.h
 *	  The session worker's note of its ZooKeeper session in the data directory.
 */
#ifndef ZKLOCK_SESSION_FILE_H
#define ZKLOCK_SESSION_FILE_H

/* Length of a ZooKeeper session password (clientid_t.passwd). */
#define ZK_PASSWD_LEN 16

extern bool session_file_write(int64 session_id, const char *passwd);
extern bool session_file_read(int64 *session_id, char *passwd);
extern void session_file_remove(void);

#endif							/* ZKLOCK_SESSION_FILE_H */
