/* Fuzzing the readers of untrusted text: the node file (node.c) and the fabric's JSON (json.c).
 *
 * A libFuzzer target (clang -fsanitize=fuzzer), and with -DMOKKA_STANDALONE_FUZZ a program of its own for
 * gcc + ASan/UBSan: it mutates the seed files given on its command line (bytes flipped, inserted, removed,
 * cut, spliced) for $IBR_FUZZ_RUNS inputs (default 100000) from a fixed seed, so a run is reproducible. */
#include "responder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size + 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    struct node node;
    char error[512];
    if (node_parse("fuzz", copy, size, &node, error, sizeof error)) {
        for (size_t i = 0; i < node.nports; i++) /* what an answer reads of it */
            if (strlen(node.ports[i].node_desc) > NODE_DESC_MAX || strlen(node.ports[i].hca) > HCA_NAME_MAX)
                abort();
        node_free(&node);
    }
    memcpy(copy, data, size);
    static struct jtok tok[4096];
    int count = json_parse(copy, size, tok, 4096);
    for (int i = 0; i < count; i++) { /* every accessor on every token, as the fabric's readers use them */
        char text[300];
        uint64_t value;
        if (tok[i].end > size || tok[i].start > tok[i].end || tok[i].after > (uint32_t)count)
            abort();
        json_string(copy, tok, i, text, sizeof text);
        json_u64(copy, tok, i, UINT64_MAX, &value);
        json_is_null(copy, tok, i);
        json_get(copy, tok, i, "ports");
        json_get(copy, tok, i, "node_name");
    }
    free(copy);
    return 0;
}

#ifdef MOKKA_STANDALONE_FUZZ
static uint64_t state = 0x9E3779B97F4A7C15u;
static uint64_t next(void)
{
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
}

int main(int argc, char **argv)
{
    enum { MAX_INPUT = 1 << 16 };
    static uint8_t seeds[16][MAX_INPUT], input[2 * MAX_INPUT];
    size_t sizes[16], nseeds = 0;
    for (int i = 1; i < argc && nseeds < 16; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (f == NULL) {
            perror(argv[i]);
            return 2;
        }
        sizes[nseeds] = fread(seeds[nseeds], 1, MAX_INPUT, f);
        fclose(f);
        /* a seed must be valid, or the mutations explore only the first error's neighbourhood */
        static char text[MAX_INPUT + 1];
        static struct jtok tok[4096];
        struct node node;
        char error[512];
        memcpy(text, seeds[nseeds], sizes[nseeds]);
        bool is_node = node_parse(argv[i], text, sizes[nseeds], &node, error, sizeof error);
        if (is_node)
            node_free(&node);
        memcpy(text, seeds[nseeds], sizes[nseeds]);
        if (!is_node && json_parse(text, sizes[nseeds], tok, 4096) < 0) {
            fprintf(stderr, "fuzz: seed %s is neither a node file nor JSON\n", argv[i]);
            return 2;
        }
        nseeds++;
    }
    if (nseeds == 0) {
        fputs("usage: fuzz SEED...\n", stderr);
        return 2;
    }
    const char *runs_text = getenv("IBR_FUZZ_RUNS");
    long runs = runs_text ? atol(runs_text) : 100000;
    for (long run = 0; run < runs; run++) {
        size_t which = next() % nseeds, size = sizes[which];
        memcpy(input, seeds[which], size);
        for (int edits = 1 + (int)(next() % 8); edits > 0; edits--) {
            size_t at = size ? next() % size : 0;
            switch (next() % 6) {
            case 0: if (size) input[at] = (uint8_t)next(); break;                       /* a byte changed */
            case 1: if (size) input[at] ^= (uint8_t)(1u << (next() % 8)); break;         /* a bit flipped */
            case 2: if (size) { memmove(input + at, input + at + 1, size - at - 1); size--; } break; /* removed */
            case 3: if (size < sizeof input - 1) { memmove(input + at + 1, input + at, size - at);   /* inserted */
                        input[at] = "\n {}[]\",:0x\\u9f"[next() % 16]; size++; } break;
            case 4: size = at; break;                                                    /* cut */
            default: { size_t other = next() % nseeds, from = sizes[other] ? next() % sizes[other] : 0; /* spliced */
                       size_t n = sizes[other] - from < sizeof input - at ? sizes[other] - from : sizeof input - at;
                       memcpy(input + at, seeds[other] + from, n); size = at + n; }
            }
        }
        LLVMFuzzerTestOneInput(input, size);
    }
    printf("fuzz: %ld inputs from %zu seeds, no fault\n", runs, nseeds);
    return 0;
}
#endif
