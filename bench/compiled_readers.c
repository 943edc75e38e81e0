/* Compiled readers measured by bench/compiled_readers.py (issue 34, item 4).
 *
 * Not part of the product: built at run time into a temporary folder and loaded with
 * ctypes, which releases the GIL for the length of each call.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Block length of the inner loop: a fixed trip count lets gcc's -O2 "very cheap"
 * vectoriser replace the whole loop with vector code (no scalar epilogue to cost). */
#define BLOCK 128

/* 1 when any of the n 16-bit words is non-finite in a sign-magnitude format whose first
 * non-finite magnitude is bad_lo (F16 0x7c00, BF16 0x7f80), else 0. One pass over the
 * words with and/add/or only: (w & 0x7fff) + (0x8000 - bad_lo) carries into bit 15
 * exactly when the magnitude is at least bad_lo, and never beyond 16 bits. */
int any_nonfinite_u16(const uint16_t *w, size_t n, uint16_t bad_lo)
{
    const uint16_t k = (uint16_t)(0x8000u - bad_lo);
    uint16_t acc = 0;
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        for (size_t j = 0; j < BLOCK; j++)
            acc |= (uint16_t)((w[i + j] & 0x7fffu) + k);
    }
    for (; i < n; i++)
        acc |= (uint16_t)((w[i] & 0x7fffu) + k);
    return (acc & 0x8000u) != 0;
}

/* The same test written with gcc/clang vector extensions instead of left to the
 * auto-vectoriser: four 16-byte accumulators (64 bytes a step, SSE2 on any x86-64),
 * reduced once at the end instead of once per block. */
typedef uint16_t v8u16 __attribute__((vector_size(16)));

int any_nonfinite_u16_vec(const uint16_t *w, size_t n, uint16_t bad_lo)
{
    const uint16_t k = (uint16_t)(0x8000u - bad_lo);
    const v8u16 mask = (v8u16){0} + 0x7fff;
    const v8u16 kk = (v8u16){0} + k;
    v8u16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        v8u16 x0, x1, x2, x3;
        memcpy(&x0, w + i, sizeof x0); /* unaligned loads */
        memcpy(&x1, w + i + 8, sizeof x1);
        memcpy(&x2, w + i + 16, sizeof x2);
        memcpy(&x3, w + i + 24, sizeof x3);
        a0 |= (x0 & mask) + kk;
        a1 |= (x1 & mask) + kk;
        a2 |= (x2 & mask) + kk;
        a3 |= (x3 & mask) + kk;
    }
    a0 |= a1 | a2 | a3;
    uint16_t acc = 0;
    for (int j = 0; j < 8; j++)
        acc |= a0[j];
    for (; i < n; i++)
        acc |= (uint16_t)((w[i] & 0x7fffu) + k);
    return (acc & 0x8000u) != 0;
}

/* A read-only pass in C, for scale: the OR of n 64-bit words (every byte read once,
 * nothing written), with the same four 16-byte accumulators. */
typedef uint64_t v2u64 __attribute__((vector_size(16)));

uint64_t or_u64(const uint64_t *w, size_t n)
{
    v2u64 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v2u64 x0, x1, x2, x3;
        memcpy(&x0, w + i, sizeof x0);
        memcpy(&x1, w + i + 2, sizeof x1);
        memcpy(&x2, w + i + 4, sizeof x2);
        memcpy(&x3, w + i + 6, sizeof x3);
        a0 |= x0;
        a1 |= x1;
        a2 |= x2;
        a3 |= x3;
    }
    a0 |= a1 | a2 | a3;
    uint64_t acc = a0[0] | a0[1];
    for (; i < n; i++)
        acc |= w[i];
    return acc;
}

/* Read one file the way watchdog/sources/procfs.py's _read_bytes does: one read of
 * 4096 bytes, more reads only when that one was full. Returns the length, -1 when it
 * cannot be opened or read, -2 when buf is too small. */
static long read_file(const char *path, char *buf, long cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    long got = 0;
    long want = cap < 4096 ? cap : 4096;
    ssize_t n = read(fd, buf, (size_t)want);
    if (n < 0) {
        close(fd);
        return -1;
    }
    got = n;
    if (n == 4096) {
        for (;;) {
            if (got >= cap) {
                close(fd);
                return -2;
            }
            long room = cap - got;
            n = read(fd, buf + got, (size_t)(room < 65536 ? room : 65536));
            if (n < 0) {
                close(fd);
                return -1;
            }
            if (n == 0)
                break;
            got += n;
        }
    }
    close(fd);
    return got;
}

/* Walk root (a procfs mount): for every numeric entry read each of the nnames files
 * (names: NUL-separated) and, when exe is set, readlink(PID/exe). Bytes go one after
 * another into data; index gets, per process, its PID and then, per file, the length
 * (-1 unreadable). Returns the number of processes, -2 when data or index is too
 * small (the caller grows them and calls again), -1 when root cannot be listed. */
long walk_proc(const char *root, const char *names, int nnames, int exe, char *data,
               long data_cap, int32_t *index, long index_cap, long *data_used)
{
    DIR *dir = opendir(root);
    if (dir == NULL)
        return -1;
    const char *name[16];
    const char *p = names;
    if (nnames > 16)
        nnames = 16;
    for (int i = 0; i < nnames; i++) {
        name[i] = p;
        p += strlen(p) + 1;
    }
    long per = 1 + nnames + (exe ? 1 : 0);
    long count = 0, used = 0;
    char path[512];
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        const char *d = e->d_name;
        if (*d < '0' || *d > '9')
            continue;
        int digits = 1;
        for (const char *q = d; *q; q++)
            if (*q < '0' || *q > '9')
                digits = 0;
        if (!digits)
            continue;
        if ((count + 1) * per > index_cap) {
            closedir(dir);
            return -2;
        }
        int32_t *row = index + count * per;
        row[0] = (int32_t)atoi(d);
        for (int i = 0; i < nnames; i++) {
            snprintf(path, sizeof path, "%s/%s/%s", root, d, name[i]);
            long n = read_file(path, data + used, data_cap - used);
            if (n == -2) {
                closedir(dir);
                return -2;
            }
            row[1 + i] = (int32_t)n;
            if (n > 0)
                used += n;
        }
        if (exe) {
            snprintf(path, sizeof path, "%s/%s/exe", root, d);
            long room = data_cap - used;
            if (room < 4096) {
                closedir(dir);
                return -2;
            }
            ssize_t n = readlink(path, data + used, (size_t)room);
            row[1 + nnames] = (int32_t)(n < 0 ? -1 : n);
            if (n > 0)
                used += n;
        }
        count++;
    }
    closedir(dir);
    *data_used = used;
    return count;
}
