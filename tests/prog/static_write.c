/* A statically linked program (the preload never loads in it) that writes one line to its stdout
 * and says on stderr what write returned: test_stdio.py execs it with an accelerated connection
 * as stdout, where it must fail at once (the kernel twin is not connected), never hang. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
    ssize_t r = write(1, "static\n", 7);
    fprintf(stderr, "static_write: write returned %zd (%s)\n", r, r < 0 ? strerror(errno) : "ok");
    return 0;
}
