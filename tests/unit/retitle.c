/* Retitles itself the way nginx and postgres do: the title is written over the argv
 * area and runs on over the environ area, padded, so the NUL that ended argv is gone
 * and /proc/PID/cmdline returns the title with no NUL at all (fs/proc/base.c,
 * get_mm_proctitle). setproctitle(3) from PyPI keeps a NUL and cannot show this.
 * Usage: RETITLE="postgres: checkpointer" ./retitle   (argv[0] kept short) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv) {
    const char *want = getenv("RETITLE");
    if (want == NULL || argc < 1) return 2;
    char title[512];
    strncpy(title, want, sizeof title - 1);
    title[sizeof title - 1] = '\0';
    char *start = argv[0];
    char *end = argv[argc - 1] + strlen(argv[argc - 1]) + 1; /* one past argv's last NUL */
    size_t argv_len = (size_t)(end - start);
    for (char **e = environ; *e != NULL; e++)
        if (*e == end) end = *e + strlen(*e) + 1; /* environ strings follow argv */
    size_t len = strlen(title);
    if (len < argv_len || len + 1 > (size_t)(end - start)) return 3;
    /* Title, then spaces to the end of the environ area (nginx pads too): not one NUL
     * is left in what /proc/PID/cmdline returns, not even at the end. */
    memset(start, ' ', (size_t)(end - start));
    memcpy(start, title, len);
    if (write(1, "ready\n", 6) != 6) return 4;
    for (;;) pause();
}
