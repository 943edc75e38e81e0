/*
 * A stand-in for libnvidia-ml.so.1, for tests on machines without an NVIDIA GPU.
 *
 * It implements the NVML entry points nvidia-ml-py (pynvml) calls for a device and
 * process listing, with the struct layouts and return codes of nvml.h:
 *   nvmlProcessInfo_v1_t  {u32 pid; u64 usedGpuMemory;}                     16 bytes
 *   nvmlProcessInfo_v2_t  {u32 pid; u64 usedGpuMemory; u32 gi; u32 ci;}     24 bytes
 *   (the _v3 listing calls take nvmlProcessInfo_t, which has the v2 layout)
 *   nvmlMemory_t          {u64 total; u64 free; u64 used;}
 *
 * Behaviour comes from a text file read at nvmlInit: the path in $FAKE_NVML_CONFIG, or
 * else "fake_nvml.conf" next to this library. One record per line, TAB-separated:
 *   driver     VERSION
 *   init_error CODE                      nvmlInit* returns CODE
 *   count_error CODE                     nvmlDeviceGetCount_v2 returns CODE
 *   device     key=value...              a whole GPU, in index order
 *   mig        parent=N index=M key=value...   a MIG device of device N
 *   proc       device=N [mig=M] kind=compute|graphics|mps pid=P mem=BYTES|NA [gi=G ci=C]
 * device/mig keys: name uuid total used handle_error mem_error mig (-1 = NOT_SUPPORTED,
 * 0 = disabled, 1 = enabled) mig_error max_mig err_compute err_graphics err_mps.
 *   block      SYMBOL [device=N]         entry point SYMBOL never returns (for device N
 *                                        only, N as for proc lines) while this line is there
 * If $FAKE_NVML_LOG names a file, each entry point appends its name there.
 * $FAKE_NVML_BLOCK=SYM[,SYM...] blocks those entry points as a `block` line does.
 * The file is read again whenever its mtime or size changed, at nvmlInit and at
 * nvmlDeviceGetCount_v2 (a snapshot's first call), and by a blocked call while it waits:
 * tests change errors and processes between snapshots, and release a block by rewriting it.
 *
 * Compile-time variants: -DFAKE_NO_V3 drops the *_v3 listing symbols; -DFAKE_ONLY_V1
 * drops both *_v3 and *_v2, leaving only the unversioned (v1 struct) ones.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#if defined(FAKE_ONLY_V1) && !defined(FAKE_NO_V3)
#define FAKE_NO_V3
#endif

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_UNKNOWN 999
#define NVML_VALUE_NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

enum { KIND_COMPUTE, KIND_GRAPHICS, KIND_MPS, KIND_COUNT };

#define MAX_DEVS 64
#define MAX_PROCS 65536 /* bench/many_gpu_procs.py lists 4,096 and more on one GPU */

struct fake_dev {
    char name[96];
    char uuid[96];
    unsigned long long total, used;
    int parent;      /* index into devs[] of the whole GPU; -1 for a whole GPU */
    int mig_index;   /* MIG device index under parent */
    int handle_error, mem_error, mig_mode, mig_error, max_mig;
    int list_error[KIND_COUNT];
};
typedef struct fake_dev *nvmlDevice_t;

struct fake_proc {
    int dev; /* index into devs[] */
    int kind;
    unsigned int pid, gi, ci;
    unsigned long long mem;
};

static struct fake_dev devs[MAX_DEVS];
static int n_devs;
static struct fake_proc procs[MAX_PROCS];
static int n_procs;
static char driver_version[80] = "550.54.15";
static int init_error, count_error, init_refs;

#define MAX_BLOCKS 16
struct fake_block {
    char symbol[96];
    int device; /* whole-GPU ordinal, or -1 for every device */
};
static struct fake_block blocks[MAX_BLOCKS];
static int n_blocks;
static struct timespec loaded_mtime;
static long long loaded_size = -1;

static void log_call(const char *name) {
    const char *path = getenv("FAKE_NVML_LOG");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", name);
    fclose(f);
}

/* index into devs[] of the Nth whole GPU, or -1 */
static int top_level(unsigned int n) {
    for (int i = 0; i < n_devs; i++)
        if (devs[i].parent < 0 && n-- == 0) return i;
    return -1;
}

static int kind_of(const char *s) {
    if (!strcmp(s, "compute")) return KIND_COMPUTE;
    if (!strcmp(s, "graphics")) return KIND_GRAPHICS;
    if (!strcmp(s, "mps")) return KIND_MPS;
    return -1;
}

static void dev_key(struct fake_dev *d, const char *k, const char *v) {
    if (!strcmp(k, "name")) snprintf(d->name, sizeof d->name, "%s", v);
    else if (!strcmp(k, "uuid")) snprintf(d->uuid, sizeof d->uuid, "%s", v);
    else if (!strcmp(k, "total")) d->total = strtoull(v, NULL, 0);
    else if (!strcmp(k, "used")) d->used = strtoull(v, NULL, 0);
    else if (!strcmp(k, "handle_error")) d->handle_error = atoi(v);
    else if (!strcmp(k, "mem_error")) d->mem_error = atoi(v);
    else if (!strcmp(k, "mig")) d->mig_mode = atoi(v);
    else if (!strcmp(k, "mig_error")) d->mig_error = atoi(v);
    else if (!strcmp(k, "max_mig")) d->max_mig = atoi(v);
    else if (!strcmp(k, "err_compute")) d->list_error[KIND_COMPUTE] = atoi(v);
    else if (!strcmp(k, "err_graphics")) d->list_error[KIND_GRAPHICS] = atoi(v);
    else if (!strcmp(k, "err_mps")) d->list_error[KIND_MPS] = atoi(v);
}

static int config_path(char *out, size_t size) {
    const char *env = getenv("FAKE_NVML_CONFIG");
    if (env && *env) {
        snprintf(out, size, "%s", env);
        return 1;
    }
    Dl_info info;
    if (!dladdr((void *)config_path, &info) || !info.dli_fname) return 0;
    snprintf(out, size, "%s", info.dli_fname);
    char *slash = strrchr(out, '/');
    if (!slash) return 0;
    snprintf(slash + 1, size - (size_t)(slash + 1 - out), "fake_nvml.conf");
    return 0;
}

/* Returns 0, or an NVML error when an explicitly named config cannot be read. */
static int load_config(void) {
    char path[4096], line[4096];
    n_devs = n_procs = init_error = count_error = n_blocks = 0;
    int explicit_path = config_path(path, sizeof path);
    struct stat st;
    if (stat(path, &st) == 0) {
        loaded_mtime = st.st_mtim;
        loaded_size = (long long)st.st_size;
    }
    FILE *f = fopen(path, "r");
    if (!f) return explicit_path ? NVML_ERROR_UNKNOWN : 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *save = NULL;
        char *tag = strtok_r(line, "\t", &save);
        if (!tag || tag[0] == '#') continue;
        if (!strcmp(tag, "driver")) {
            char *v = strtok_r(NULL, "\t", &save);
            if (v) snprintf(driver_version, sizeof driver_version, "%s", v);
        } else if (!strcmp(tag, "init_error")) {
            char *v = strtok_r(NULL, "\t", &save);
            if (v) init_error = atoi(v);
        } else if (!strcmp(tag, "block") && n_blocks < MAX_BLOCKS) {
            char *v = strtok_r(NULL, "\t", &save);
            if (!v) continue;
            struct fake_block *b = &blocks[n_blocks++];
            snprintf(b->symbol, sizeof b->symbol, "%s", v);
            b->device = -1;
            char *tok;
            while ((tok = strtok_r(NULL, "\t", &save)))
                if (!strncmp(tok, "device=", 7)) b->device = atoi(tok + 7);
        } else if (!strcmp(tag, "count_error")) {
            char *v = strtok_r(NULL, "\t", &save);
            if (v) count_error = atoi(v);
        } else if ((!strcmp(tag, "device") || !strcmp(tag, "mig")) && n_devs < MAX_DEVS) {
            struct fake_dev *d = &devs[n_devs];
            memset(d, 0, sizeof *d);
            d->parent = -1;
            d->mig_mode = -2; /* decided below */
            int parent_n = -1;
            char *tok;
            while ((tok = strtok_r(NULL, "\t", &save))) {
                char *eq = strchr(tok, '=');
                if (!eq) continue;
                *eq = 0;
                if (!strcmp(tok, "parent")) parent_n = atoi(eq + 1);
                else if (!strcmp(tok, "index")) d->mig_index = atoi(eq + 1);
                else dev_key(d, tok, eq + 1);
            }
            if (!strcmp(tag, "mig")) {
                d->parent = top_level((unsigned int)parent_n);
                if (d->parent < 0) continue; /* unknown parent: ignore the line */
            }
            n_devs++;
        } else if (!strcmp(tag, "proc") && n_procs < MAX_PROCS) {
            struct fake_proc *p = &procs[n_procs];
            memset(p, 0, sizeof *p);
            int dev_n = -1, mig_n = -1;
            p->kind = KIND_COMPUTE;
            char *tok;
            while ((tok = strtok_r(NULL, "\t", &save))) {
                char *eq = strchr(tok, '=');
                if (!eq) continue;
                *eq = 0;
                const char *v = eq + 1;
                if (!strcmp(tok, "device")) dev_n = atoi(v);
                else if (!strcmp(tok, "mig")) mig_n = atoi(v);
                else if (!strcmp(tok, "kind")) p->kind = kind_of(v);
                else if (!strcmp(tok, "pid")) p->pid = (unsigned int)strtoul(v, NULL, 0);
                else if (!strcmp(tok, "mem"))
                    p->mem = strcmp(v, "NA") ? strtoull(v, NULL, 0) : NVML_VALUE_NOT_AVAILABLE;
                else if (!strcmp(tok, "gi")) p->gi = (unsigned int)strtoul(v, NULL, 0);
                else if (!strcmp(tok, "ci")) p->ci = (unsigned int)strtoul(v, NULL, 0);
            }
            p->dev = top_level((unsigned int)dev_n);
            if (p->dev >= 0 && mig_n >= 0) {
                int found = -1;
                for (int i = 0; i < n_devs; i++)
                    if (devs[i].parent == p->dev && devs[i].mig_index == mig_n) found = i;
                p->dev = found;
            }
            if (p->dev >= 0 && p->kind >= 0) n_procs++;
        }
    }
    fclose(f);
    /* MIG defaults: enabled when the config gives MIG devices, else NOT_SUPPORTED. */
    for (int i = 0; i < n_devs; i++) {
        int children = 0, top = 0;
        for (int j = 0; j < n_devs; j++)
            if (devs[j].parent == i) {
                children++;
                if (devs[j].mig_index + 1 > top) top = devs[j].mig_index + 1;
            }
        if (devs[i].mig_mode == -2) devs[i].mig_mode = children ? 1 : -1;
        if (devs[i].max_mig == 0) devs[i].max_mig = top;
    }
    return 0;
}

static int valid(nvmlDevice_t d) {
    return init_refs > 0 && d >= devs && d < devs + n_devs;
}

/* Read the configuration again if the file changed since it was loaded. */
static void maybe_reload(void) {
    char path[4096];
    config_path(path, sizeof path);
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (st.st_mtim.tv_sec == loaded_mtime.tv_sec && st.st_mtim.tv_nsec == loaded_mtime.tv_nsec &&
        (long long)st.st_size == loaded_size)
        return;
    load_config();
}

/* Whole-GPU ordinal of a device (a MIG device counts as its parent), or -1. */
static int ordinal(nvmlDevice_t d) {
    if (!(d >= devs && d < devs + n_devs)) return -1;
    int i = d->parent >= 0 ? d->parent : (int)(d - devs), n = 0;
    for (int j = 0; j < i; j++)
        if (devs[j].parent < 0) n++;
    return n;
}

static int env_blocks(const char *name) {
    const char *env = getenv("FAKE_NVML_BLOCK");
    if (!env) return 0;
    size_t len = strlen(name);
    for (const char *p = env; (p = strstr(p, name)); p += len)
        if ((p == env || p[-1] == ',') && (p[len] == 0 || p[len] == ',')) return 1;
    return 0;
}

static int is_blocked(const char *name, int device) {
    if (env_blocks(name)) return 1;
    for (int i = 0; i < n_blocks; i++)
        if (!strcmp(blocks[i].symbol, name) && (blocks[i].device < 0 || blocks[i].device == device))
            return 1;
    return 0;
}

/* A hung driver call (e.g. after an Xid 45): wait while the block stands. */
static void maybe_block(const char *name, int device) {
    while (is_blocked(name, device)) {
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
        if (!env_blocks(name)) maybe_reload();
    }
}

static nvmlReturn_t do_init(const char *name) {
    log_call(name);
    if (init_refs == 0) {
        int rc = load_config();
        if (rc) return rc;
    }
    maybe_block(name, -1);
    if (init_error) return init_error;
    init_refs++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return do_init("nvmlInitWithFlags"); }
nvmlReturn_t nvmlInit_v2(void) { return do_init("nvmlInit_v2"); }
nvmlReturn_t nvmlInit(void) { return do_init("nvmlInit"); }

nvmlReturn_t nvmlShutdown(void) {
    log_call("nvmlShutdown");
    if (init_refs == 0) return NVML_ERROR_UNINITIALIZED;
    init_refs--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    log_call("nvmlSystemGetDriverVersion");
    if (init_refs == 0) return NVML_ERROR_UNINITIALIZED;
    if (!version || length <= strlen(driver_version)) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(version, driver_version);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    log_call("nvmlDeviceGetCount_v2");
    if (init_refs == 0) return NVML_ERROR_UNINITIALIZED;
    maybe_reload();
    maybe_block("nvmlDeviceGetCount_v2", -1);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (count_error) return count_error;
    unsigned int n = 0;
    for (int i = 0; i < n_devs; i++)
        if (devs[i].parent < 0) n++;
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    log_call("nvmlDeviceGetHandleByIndex_v2");
    if (init_refs == 0) return NVML_ERROR_UNINITIALIZED;
    maybe_block("nvmlDeviceGetHandleByIndex_v2", (int)index);
    int i = top_level(index);
    if (i < 0 || !device) return NVML_ERROR_INVALID_ARGUMENT;
    if (devs[i].handle_error) return devs[i].handle_error;
    *device = &devs[i];
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_str(const char *src, char *dst, unsigned int length) {
    if (!dst || length <= strlen(src)) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    log_call("nvmlDeviceGetName");
    maybe_block("nvmlDeviceGetName", ordinal(d));
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    return copy_str(d->name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    log_call("nvmlDeviceGetUUID");
    maybe_block("nvmlDeviceGetUUID", ordinal(d));
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    return copy_str(d->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *memory) {
    log_call("nvmlDeviceGetMemoryInfo");
    maybe_block("nvmlDeviceGetMemoryInfo", ordinal(d));
    if (!valid(d) || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mem_error) return d->mem_error;
    memory->total = d->total;
    memory->used = d->used;
    memory->free = d->total > d->used ? d->total - d->used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    log_call("nvmlDeviceGetMigMode");
    maybe_block("nvmlDeviceGetMigMode", ordinal(d));
    if (!valid(d) || !current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig_error) return d->mig_error;
    if (d->parent >= 0 || d->mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = (unsigned int)d->mig_mode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    log_call("nvmlDeviceGetMaxMigDeviceCount");
    if (!valid(d) || !count) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent >= 0 || d->mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    *count = (unsigned int)d->max_mig;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index,
                                                 nvmlDevice_t *mig) {
    log_call("nvmlDeviceGetMigDeviceHandleByIndex");
    if (!valid(d) || !mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent >= 0 || d->mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= (unsigned int)d->max_mig) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < n_devs; i++)
        if (devs[i].parent == d - devs && devs[i].mig_index == (int)index) {
            *mig = &devs[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

/* The two-call protocol of nvml.h: with *count too small (0 and NULL at first), set
 * *count to the number needed and return NVML_ERROR_INSUFFICIENT_SIZE. */
static nvmlReturn_t list(nvmlDevice_t d, int kind, unsigned int *count, void *infos, int version) {
    if (!valid(d) || !count) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->list_error[kind]) return d->list_error[kind];
    unsigned int n = 0;
    for (int i = 0; i < n_procs; i++)
        if (&devs[procs[i].dev] == d && procs[i].kind == kind) n++;
    if (*count < n || (n && !infos)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int k = 0;
    for (int i = 0; i < n_procs; i++) {
        if (&devs[procs[i].dev] != d || procs[i].kind != kind) continue;
        if (version == 1) {
            nvmlProcessInfo_v1_t *out = (nvmlProcessInfo_v1_t *)infos + k;
            out->pid = procs[i].pid;
            out->usedGpuMemory = procs[i].mem;
        } else {
            nvmlProcessInfo_v2_t *out = (nvmlProcessInfo_v2_t *)infos + k;
            out->pid = procs[i].pid;
            out->usedGpuMemory = procs[i].mem;
            out->gpuInstanceId = procs[i].gi;
            out->computeInstanceId = procs[i].ci;
        }
        k++;
    }
    *count = n;
    return NVML_SUCCESS;
}

#define LISTER(sym, kind, version)                                                   \
    nvmlReturn_t sym(nvmlDevice_t d, unsigned int *count, void *infos) {             \
        log_call(#sym);                                                              \
        maybe_block(#sym, ordinal(d));                                               \
        return list(d, kind, count, infos, version);                                 \
    }

#ifndef FAKE_NO_V3
LISTER(nvmlDeviceGetComputeRunningProcesses_v3, KIND_COMPUTE, 2)
LISTER(nvmlDeviceGetGraphicsRunningProcesses_v3, KIND_GRAPHICS, 2)
LISTER(nvmlDeviceGetMPSComputeRunningProcesses_v3, KIND_MPS, 2)
#endif
#ifndef FAKE_ONLY_V1
LISTER(nvmlDeviceGetComputeRunningProcesses_v2, KIND_COMPUTE, 2)
LISTER(nvmlDeviceGetGraphicsRunningProcesses_v2, KIND_GRAPHICS, 2)
LISTER(nvmlDeviceGetMPSComputeRunningProcesses_v2, KIND_MPS, 2)
#endif
LISTER(nvmlDeviceGetComputeRunningProcesses, KIND_COMPUTE, 1)
LISTER(nvmlDeviceGetGraphicsRunningProcesses, KIND_GRAPHICS, 1)
LISTER(nvmlDeviceGetMPSComputeRunningProcesses, KIND_MPS, 1)
