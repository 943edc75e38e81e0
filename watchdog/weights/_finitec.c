/* The compiled non-finite check of watchdog/weights/finite.py (issue 34, item 4).
 *
 * One read of the data, and/add/or only: for a sign-magnitude format of w bits whose
 * non-finite values are exactly the magnitudes at or above bad_lo (F16, BF16, E5M2,
 * E4M3FN), (x & (2^(w-1) - 1)) + (2^(w-1) - bad_lo) carries into the top bit exactly
 * when the magnitude is at least bad_lo, and never beyond w bits. OR-ing that over every
 * word and testing the top bit once answers "is any value non-finite". numpy needs two
 * max-reductions (two reads of a 4 MiB chunk) for the same answer; measured in
 * docs/performance.md, sections "item 4".
 *
 * Built by setuptools as an optional extension (pyproject.toml): a host without a C
 * compiler installs the package without it and finite.py keeps numpy's reductions. It
 * reads words in the host's byte order from a contiguous buffer at any alignment;
 * finite.py sends only contiguous little-endian data on little-endian hosts and checks
 * this module against its numpy path at import before using it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Below this many bytes the GIL is kept: taking it back costs more than the scan. */
#define RELEASE_GIL_BYTES 65536

#if defined(__GNUC__) || defined(__clang__)
/* gcc/clang vector extensions: 16-byte vectors need no -march on x86-64 (SSE2) or
 * aarch64 (NEON). Four accumulators, reduced once at the end: gcc's own -O2 vectoriser
 * reduces every block and was measured a quarter slower (docs/performance.md). */
#define HAVE_VECTORS 1
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef uint8_t v16u8 __attribute__((vector_size(16)));
#endif

static int any_bad_u16(const unsigned char *p, size_t n, uint16_t bad_lo)
{
    const uint16_t k = (uint16_t)(0x8000u - bad_lo);
    uint16_t acc = 0;
    size_t i = 0;
#ifdef HAVE_VECTORS
    const v8u16 mask = (v8u16){0} + 0x7fff;
    const v8u16 kk = (v8u16){0} + k;
    v8u16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (; i + 32 <= n; i += 32) {
        v8u16 x0, x1, x2, x3;
        /* memcpy: unaligned loads; a mapped tensor may start at any byte. */
        memcpy(&x0, p + 2 * i, sizeof x0);
        memcpy(&x1, p + 2 * i + 16, sizeof x1);
        memcpy(&x2, p + 2 * i + 32, sizeof x2);
        memcpy(&x3, p + 2 * i + 48, sizeof x3);
        a0 |= (x0 & mask) + kk;
        a1 |= (x1 & mask) + kk;
        a2 |= (x2 & mask) + kk;
        a3 |= (x3 & mask) + kk;
    }
    a0 |= a1 | a2 | a3;
    for (int j = 0; j < 8; j++)
        acc |= a0[j];
#endif
    for (; i < n; i++) {
        uint16_t x;
        memcpy(&x, p + 2 * i, sizeof x);
        acc |= (uint16_t)((x & 0x7fffu) + k);
    }
    return (acc & 0x8000u) != 0;
}

static int any_bad_u8(const unsigned char *p, size_t n, uint8_t bad_lo)
{
    const uint8_t k = (uint8_t)(0x80u - bad_lo);
    uint8_t acc = 0;
    size_t i = 0;
#ifdef HAVE_VECTORS
    const v16u8 mask = (v16u8){0} + 0x7f;
    const v16u8 kk = (v16u8){0} + k;
    v16u8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (; i + 64 <= n; i += 64) {
        v16u8 x0, x1, x2, x3;
        memcpy(&x0, p + i, sizeof x0);
        memcpy(&x1, p + i + 16, sizeof x1);
        memcpy(&x2, p + i + 32, sizeof x2);
        memcpy(&x3, p + i + 48, sizeof x3);
        a0 |= (x0 & mask) + kk;
        a1 |= (x1 & mask) + kk;
        a2 |= (x2 & mask) + kk;
        a3 |= (x3 & mask) + kk;
    }
    a0 |= a1 | a2 | a3;
    for (int j = 0; j < 16; j++)
        acc |= a0[j];
#endif
    for (; i < n; i++)
        acc |= (uint8_t)((p[i] & 0x7fu) + k);
    return (acc & 0x80u) != 0;
}

PyDoc_STRVAR(any_nonfinite_doc,
"any_nonfinite(buffer, itemsize, bad_lo, /) -> bool\n\n"
"True if any itemsize-byte word of the contiguous buffer (host byte order) has a\n"
"magnitude (the word without its top bit) of at least bad_lo. itemsize is 1 or 2;\n"
"0 <= bad_lo <= 2**(8*itemsize-1). Raises ValueError for other arguments or a length\n"
"that is not a whole number of words; the exporter's error (BufferError, or ValueError\n"
"from numpy) for a buffer that is not contiguous.");

static PyObject *any_nonfinite(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int itemsize;
    long bad_lo;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*il:any_nonfinite", &view, &itemsize, &bad_lo))
        return NULL;
    if (itemsize != 1 && itemsize != 2) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "itemsize must be 1 or 2, not %d", itemsize);
    }
    const long top = itemsize == 2 ? 0x8000L : 0x80L;
    if (bad_lo < 0 || bad_lo > top) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "bad_lo %ld is outside 0..%ld", bad_lo, top);
    }
    if (view.len % itemsize) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "%zd bytes is not a whole number of %d-byte words",
                            view.len, itemsize);
    }
    const unsigned char *p = (const unsigned char *)view.buf;
    const size_t n = (size_t)view.len / (size_t)itemsize;
    int bad;
    if (view.len >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        bad = itemsize == 2 ? any_bad_u16(p, n, (uint16_t)bad_lo) : any_bad_u8(p, n, (uint8_t)bad_lo);
        Py_END_ALLOW_THREADS
    } else {
        bad = itemsize == 2 ? any_bad_u16(p, n, (uint16_t)bad_lo) : any_bad_u8(p, n, (uint8_t)bad_lo);
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(bad);
}

static PyMethodDef methods[] = {
    {"any_nonfinite", any_nonfinite, METH_VARARGS, any_nonfinite_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_finitec",
    "The compiled non-finite check of rogue_watchdog.weights.finite (issue 34).",
    0,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__finitec(void)
{
    return PyModule_Create(&module);
}
