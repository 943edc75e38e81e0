/*
 * llama.cpp's C GGUF reader, as a loader sees a file: gguf_init_from_file() with
 * no_alloc = false (ggml/src/gguf.cpp reads and validates the header, tensor table and
 * data blob), then every tensor converted the way ggml converts it for compute: the
 * type's to_float (ggml_get_type_traits(type)->to_float, ggml.c / ggml-quants.c).
 *
 * Usage: reader FILE.gguf OUT
 * Exit 0 and OUT written when ggml accepted the file; exit 3 when gguf_init_from_file
 * refused it (its reason is on stderr, from GGML_LOG_ERROR). OUT holds, per tensor:
 *   u32 name_len, name bytes, i32 ggml type, i64 ne[4], u8 kind, u64 nbytes, bytes
 * kind 'f': nbytes/4 float32 values from to_float (F32 copied as stored);
 * kind 'r': the stored bytes (integer and F64 tensors, which ggml does not convert);
 * kind 'n': ggml has no to_float for the type (Q8_K): no values.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "gguf.h"

static void put(FILE *out, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, out) != n) {
        perror("write");
        exit(4);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s FILE.gguf OUT\n", argv[0]);
        return 64;
    }
    struct ggml_context *data = NULL;
    struct gguf_init_params params = {false, &data};
    struct gguf_context *g = gguf_init_from_file(argv[1], params);
    if (g == NULL) {
        return 3;
    }
    FILE *out = fopen(argv[2], "wb");
    if (out == NULL) {
        perror(argv[2]);
        return 4;
    }
    const int64_t n = gguf_get_n_tensors(g);
    for (int64_t i = 0; i < n; i++) {
        const char *name = gguf_get_tensor_name(g, i);
        struct ggml_tensor *t = ggml_get_tensor(data, name);
        if (t == NULL) {
            fprintf(stderr, "tensor %s not in the context\n", name);
            return 5;
        }
        const uint32_t name_len = (uint32_t) strlen(name);
        const int32_t type = (int32_t) t->type;
        put(out, &name_len, 4);
        put(out, name, name_len);
        put(out, &type, 4);
        put(out, t->ne, sizeof(int64_t) * 4);
        const int64_t nel = ggml_nelements(t);
        const struct ggml_type_traits *tr = ggml_get_type_traits(t->type);
        uint8_t kind;
        uint64_t nbytes;
        if (t->type == GGML_TYPE_F32) {
            kind = 'f';
            nbytes = (uint64_t) nel * 4;
            put(out, &kind, 1);
            put(out, &nbytes, 8);
            put(out, t->data, nbytes);
        } else if (tr->to_float != NULL) {
            float *y = malloc(nel > 0 ? (size_t) nel * 4 : 1);
            if (y == NULL) {
                return 6;
            }
            /* to_float converts whole rows: ne[0] elements at a time. */
            const int64_t rows = nel / (t->ne[0] > 0 ? t->ne[0] : 1);
            const size_t row_bytes = ggml_row_size(t->type, t->ne[0]);
            for (int64_t r = 0; t->ne[0] > 0 && r < rows; r++) {
                tr->to_float((const char *) t->data + r * row_bytes, y + r * t->ne[0], t->ne[0]);
            }
            kind = 'f';
            nbytes = (uint64_t) nel * 4;
            put(out, &kind, 1);
            put(out, &nbytes, 8);
            put(out, y, nbytes);
            free(y);
        } else if (!tr->is_quantized) {
            kind = 'r';
            nbytes = ggml_nbytes(t);
            put(out, &kind, 1);
            put(out, &nbytes, 8);
            put(out, t->data, nbytes);
        } else {
            kind = 'n';
            nbytes = 0;
            put(out, &kind, 1);
            put(out, &nbytes, 8);
        }
    }
    fclose(out);
    gguf_free(g);
    ggml_free(data);
    return 0;
}
