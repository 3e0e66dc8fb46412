/* feed.c: the state feed of a library that has no state file beside it (a container given the driver's
 * files one by one): the node's service at nvidia-persistenced's socket passes it read-only descriptors of
 * the state file and the setter record (native/README.md, "The state feed"). Above log.c, below state.c. */
#ifndef MOKKA_FEED_H
#define MOKKA_FEED_H

#include <stdint.h>

/* the sockets tried, in order: where a GPU container has nvidia-persistenced's */
#define MK_FEED_SOCKET "/run/nvidia-persistenced/socket"
#define MK_FEED_SOCKET_VAR "/var/run/nvidia-persistenced/socket"

/* Connect to the first socket that accepts; its path, or that of one that is there but refused (dialled again at
 * each receive, at most once a second), or NULL when there is none. */
const char *mk_feed_connect(void);
/* why there is no state yet: the last dial's errno (ENOENT once connected) */
int mk_feed_errno(void);
/* Take what the service sent since the last call, without blocking (wait_ms > 0: wait that long for a first
 * message while none was ever taken). 1: new descriptors are held, 0: nothing new. A lost service is dialled
 * again at most once a second; the descriptors held stay. Callers serialise (state.c's refresh lock). */
int mk_feed_receive(uint64_t now, int wait_ms);
/* the descriptors held: the state file's (-1 before the first message) and the setter record's (-1: none) */
int mk_feed_state_fd(void);
int mk_feed_settings_fd(void);
/* in a child after fork: the connection is the parent's, so the next receive dials a new one */
void mk_feed_after_fork(void);

#endif
