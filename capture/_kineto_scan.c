/* Columnar decoder for torch.profiler (Kineto) trace events: the compiled half of
 * capture/kineto_json.py.
 *
 * scan(buf, start, end, cats) reads buf[start:end], a comma-separated run of JSON objects
 * (the inside of the traceEvents array, in any layout), and returns the fields zym reads of
 * the complete ("ph": "X") events whose "cat" is one of ``cats``, as columns: numbers as
 * int64/float64 buffers with Arrow validity bitmaps, text (names, shapes) as int32 ids into
 * the batch's distinct values. No Python object per event. It validates the whole text as
 * JSON (every string, number and nested value, read or skipped), so a batch cut inside a
 * string or a nested array is refused.
 *
 * It accepts only what it can decode exactly as the msgspec decoder of kineto_json.py does,
 * and returns None for anything else: text that is not JSON, a field of the wrong type
 * (a float where an integer belongs, a number as a string, "args" not an object...), an
 * escaped object key, a key twice in one object, an integer past 64 bits, nesting past
 * MAX_DEPTH. The caller then decodes that batch with msgspec, which names the problem or
 * decodes it: this file never decides an error message, and its fast path only ever
 * covers inputs whose meaning is plain.
 *
 * The GIL is released while scanning: batches can be scanned by threads in parallel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_CATS 32

/* Integer columns, in the order they are returned. */
enum { I_PID, I_TID, I_EXT, I_PYID, I_PYPARENT, I_CORR, I_CBID, I_DEVICE, I_STREAM, I_BYTES,
       I_GRAPH, I_GRID_X, I_GRID_Y, I_GRID_Z, I_BLOCK_X, I_BLOCK_Y, I_BLOCK_Z, I_SEQ, N_INT };
enum { F_TS, F_DUR, N_FLOAT };
enum { S_NAME, S_DIMS, S_TYPES, N_STR };

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_grow(Buf *b, size_t more);

static inline int buf_reserve(Buf *b, size_t more) {
    return b->len + more <= b->cap ? 0 : buf_grow(b, more);
}

static int buf_grow(Buf *b, size_t more) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    char *data = realloc(b->data, cap);
    if (data == NULL)
        return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int buf_append(Buf *b, const void *p, size_t n) {
    if (buf_reserve(b, n))
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* Distinct values of a text column (names, shapes): rows hold their ids, in order of first
 * appearance in the batch; the caller maps them to its own. */
typedef struct {
    Buf data;            /* the values, one after another */
    Buf spans;           /* (offset, length) of each value, as size_t pairs */
    int32_t *slots;      /* open addressing: value id + 1, 0 for empty */
    size_t n_slots, count;
} Interner;

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n, w;
    for (; n >= 8; p += 8, n -= 8) {  /* 8 bytes at a time, then the tail */
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

static int interner_grow(Interner *t) {
    size_t n = t->n_slots ? t->n_slots * 2 : 1024;
    int32_t *slots = calloc(n, sizeof *slots);
    if (slots == NULL)
        return -1;
    const size_t *spans = (const size_t *)t->spans.data;
    for (size_t id = 0; id < t->count; id++) {
        size_t i = hash_bytes(t->data.data + spans[2 * id], spans[2 * id + 1]) & (n - 1);
        while (slots[i])
            i = (i + 1) & (n - 1);
        slots[i] = (int32_t)id + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->n_slots = n;
    return 0;
}

/* The id of value p[:n], added if new; -1 when out of memory. */
static int32_t intern(Interner *t, const char *p, size_t n) {
    if (2 * (t->count + 1) > t->n_slots && interner_grow(t))
        return -1;
    size_t mask = t->n_slots - 1, i = hash_bytes(p, n) & mask;
    const size_t *spans = (const size_t *)t->spans.data;
    for (; t->slots[i]; i = (i + 1) & mask) {
        size_t id = (size_t)t->slots[i] - 1;
        if (spans[2 * id + 1] == n && memcmp(t->data.data + spans[2 * id], p, n) == 0)
            return (int32_t)id;
    }
    size_t span[2] = {t->data.len, n};
    if (t->count >= INT32_MAX - 1 || buf_append(&t->data, p, n)
        || buf_append(&t->spans, span, sizeof span))
        return -1;
    t->slots[i] = (int32_t)t->count + 1;
    return (int32_t)t->count++;
}

/* One event's fields while it is read; committed to the columns if it is kept. */
typedef struct {
    int64_t ints[N_INT];
    double floats[N_FLOAT];
    uint32_t int_valid, float_valid;   /* bit per column */
    const char *raw[2];                /* Input Dims, Input type: the source text */
    size_t raw_len[2];
    int has_name;                      /* the decoded name: in Scanner.name */
    int cat;                           /* index in cats, -1: another category or none */
    int is_complete;                   /* "ph" == "X" */
} Row;

typedef struct {
    const char *p, *end;
    const char *const *cats;
    const size_t *cat_lens;
    int n_cats;
    /* columns */
    size_t n, cap;                     /* rows, and room for rows in every column */
    Buf cat_codes;
    Buf ints[N_INT], int_valid[N_INT];
    Buf floats[N_FLOAT], float_valid[N_FLOAT];
    Buf str_ids[N_STR];                /* int32 per row, -1 for none */
    Interner strs[N_STR];
    Buf name;                          /* the current event's decoded name */
} Scanner;

#define FAIL (-1)   /* not plain JSON of the expected shape: the caller decodes with msgspec */
#define NOMEM (-2)

static inline void skip_ws(Scanner *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static int utf8_valid(const unsigned char *p, const unsigned char *end) {
    while (p < end) {
        unsigned char c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        int n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
        else return 0;
        if (end - p <= n)
            return 0;
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF))
            || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        p += n + 1;
    }
    return 1;
}

static int hex4(const char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static int put_utf8(Buf *out, uint32_t cp) {
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (unsigned char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = 0xC0 | (cp >> 6); b[1] = 0x80 | (cp & 0x3F); n = 2; }
    else if (cp < 0x10000) {
        b[0] = 0xE0 | (cp >> 12); b[1] = 0x80 | ((cp >> 6) & 0x3F); b[2] = 0x80 | (cp & 0x3F);
        n = 3;
    } else {
        b[0] = 0xF0 | (cp >> 18); b[1] = 0x80 | ((cp >> 12) & 0x3F);
        b[2] = 0x80 | ((cp >> 6) & 0x3F); b[3] = 0x80 | (cp & 0x3F); n = 4;
    }
    return buf_append(out, b, n) ? NOMEM : 0;
}

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* A string at s->p (its opening quote). With ``out``, its decoded UTF-8 is appended there;
 * ``raw_start``/``raw_len`` (optional): the text between the quotes; ``escaped``: whether it
 * held a backslash. */
static int read_string_slow(Scanner *s, Buf *out, const char **raw_start, size_t *raw_len,
                            int *escaped) {
    const char *p = s->p + 1, *end = s->end, *run = p;
    int high = 0, esc = 0;
    for (;;) {
        while (p < end && (unsigned char)*p >= 0x20 && *p != '"' && *p != '\\') {
            high |= (unsigned char)*p & 0x80;
            p++;
        }
        if (p >= end || (unsigned char)*p < 0x20)
            return FAIL;
        if (high && !utf8_valid((const unsigned char *)run, (const unsigned char *)p))
            return FAIL;
        if (out && buf_append(out, run, (size_t)(p - run)))
            return NOMEM;
        high = 0;
        if (*p == '"')
            break;
        esc = 1;
        if (end - p < 2)
            return FAIL;
        char c = p[1];
        const char *simple = strchr("\"\\/bfnrt", c);
        if (c != 0 && simple) {
            static const char decoded[] = "\"\\/\b\f\n\r\t";
            if (out && buf_append(out, &decoded[simple - "\"\\/bfnrt"], 1))
                return NOMEM;
            p += 2;
        } else if (c == 'u') {
            uint32_t cp, lo;
            if (end - p < 6 || hex4(p + 2, &cp))
                return FAIL;
            p += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {  /* a surrogate pair, or a lone one */
                if (end - p >= 6 && p[0] == '\\' && p[1] == 'u' && hex4(p + 2, &lo) == 0
                    && lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                } else {
                    return FAIL;  /* not UTF-8 text: msgspec decides */
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return FAIL;
            }
            if (out) {
                int r = put_utf8(out, cp);
                if (r)
                    return r;
            }
        } else {
            return FAIL;
        }
        run = p;
    }
    if (raw_start) {
        *raw_start = s->p + 1;
        *raw_len = (size_t)(p - (s->p + 1));
    }
    if (escaped)
        *escaped = esc;
    s->p = p + 1;
    return 0;
}

/* The bytes that end the plain part of a string: a quote, a backslash, a control or a
 * non-ASCII byte; the first one's index in the 8 bytes at p, or 8. */
static inline unsigned plain_run(const char *p) {
    uint64_t w, q, b;
    memcpy(&w, p, 8);
    q = w ^ (ONES * '"');
    b = w ^ (ONES * '\\');
    uint64_t special = ((q - ONES) & ~q) | ((b - ONES) & ~b) | ((w - ONES * 0x20) & ~w) | w;
    special &= HIGHS;  /* the first flagged byte is exact (later ones may be borrows) */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    /* borrows run toward earlier bytes here: find the first one byte by byte */
    for (unsigned i = 0; special && i < 8; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80)
            return i;
    }
    return 8;
#else
    return special ? (unsigned)__builtin_ctzll(special) >> 3 : 8;
#endif
}

/* A string: the common case (ASCII, no escape) here, the rest in read_string_slow. */
static inline int read_string(Scanner *s, Buf *out, const char **raw_start, size_t *raw_len,
                              int *escaped) {
    const char *start = s->p + 1, *q = start, *end = s->end;
    for (;;) {
        if (end - q < 8)
            return read_string_slow(s, out, raw_start, raw_len, escaped);
        unsigned n = plain_run(q);
        q += n;
        if (n < 8)
            break;
    }
    if (*q != '"')
        return read_string_slow(s, out, raw_start, raw_len, escaped);
    if (out && buf_append(out, start, (size_t)(q - start)))
        return NOMEM;
    if (raw_start) {
        *raw_start = start;
        *raw_len = (size_t)(q - start);
    }
    if (escaped)
        *escaped = 0;
    s->p = q + 1;
    return 0;
}

/* A JSON number at s->p: its extent, and whether it is an integer (no fraction or exponent). */
static int scan_number(Scanner *s, const char **start, size_t *len, int *integer) {
    const char *p = s->p, *end = s->end;
    *start = p;
    *integer = 1;
    if (p < end && *p == '-')
        p++;
    if (p >= end)
        return FAIL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    } else {
        return FAIL;
    }
    if (p < end && *p == '.') {
        *integer = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return FAIL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *integer = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return FAIL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    *len = (size_t)(p - *start);
    s->p = p;
    return 0;
}

/* Decimal digits (an optional '-' first) as int64; FAIL past 64 bits. */
static int parse_int64(const char *p, size_t len, int64_t *out) {
    int neg = 0;
    if (len && *p == '-') {
        neg = 1;
        p++;
        len--;
    }
    if (len == 0 || len > 19)
        return FAIL;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return FAIL;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX)
        return FAIL;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int literal(Scanner *s, const char *word, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return FAIL;
    s->p += n;
    return 0;
}

static int skip_value(Scanner *s, int depth);

static int skip_container(Scanner *s, int depth, char close) {
    if (depth > MAX_DEPTH)
        return FAIL;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    for (;;) {
        int r;
        if (close == '}') {
            if (s->p >= s->end || *s->p != '"')
                return FAIL;
            if ((r = read_string(s, NULL, NULL, NULL, NULL)))
                return r;
            skip_ws(s);
            if (s->p >= s->end || *s->p != ':')
                return FAIL;
            s->p++;
            skip_ws(s);
        }
        if ((r = skip_value(s, depth + 1)))
            return r;
        skip_ws(s);
        if (s->p >= s->end)
            return FAIL;
        if (*s->p == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (*s->p == close) {
            s->p++;
            return 0;
        }
        return FAIL;
    }
}

/* Any JSON value at s->p, validated and passed over. */
static int skip_value(Scanner *s, int depth) {
    if (s->p >= s->end)
        return FAIL;
    const char *start;
    size_t len;
    int integer;
    switch (*s->p) {
    case '"': return read_string(s, NULL, NULL, NULL, NULL);
    case '{': return skip_container(s, depth, '}');
    case '[': return skip_container(s, depth, ']');
    case 't': return literal(s, "true", 4);
    case 'f': return literal(s, "false", 5);
    case 'n': return literal(s, "null", 4);
    default: return scan_number(s, &start, &len, &integer);
    }
}

/* An integer field (or null); anything else is for msgspec to judge. */
static int read_int(Scanner *s, Row *row, int col) {
    const char *p = s->p, *end = s->end;
    if (p < end && *p == 'n')
        return literal(s, "null", 4);
    /* the common case in one pass: up to 18 digits, no leading zero, no fraction */
    int neg = p < end && *p == '-';
    const char *q = p + neg, *first = q;
    uint64_t v = 0;
    while (q < end && (unsigned)(*q - '0') < 10 && q - first < 18)
        v = v * 10 + (uint64_t)(*q++ - '0');
    if (q > first && (q - first == 1 || *first != '0') && q < end
        && (unsigned)(*q - '0') >= 10 && *q != '.' && *q != 'e' && *q != 'E') {
        row->ints[col] = neg ? -(int64_t)v : (int64_t)v;
        row->int_valid |= 1u << col;
        s->p = q;
        return 0;
    }
    const char *start;
    size_t len;
    int integer, r;
    if ((r = scan_number(s, &start, &len, &integer)))
        return r;
    if (!integer || parse_int64(start, len, &row->ints[col]))
        return FAIL;
    row->int_valid |= 1u << col;
    return 0;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A number field (integer or not) as float64, or null. The common case in one pass by
 * Clinger's fast path: digits[.digits], no exponent, whose digits form an integer
 * m <= 2^53 with at most 22 after the point, is exactly m / 10^k, one correctly rounded
 * division. Anything else: strtod (correctly rounded, as msgspec). */
static int read_float(Scanner *s, Row *row, int col) {
    const char *p = s->p, *end = s->end;
    if (p < end && *p == 'n')
        return literal(s, "null", 4);
    int neg = p < end && *p == '-';
    const char *q = p + neg, *first = q;
    uint64_t m = 0;
    while (q < end && (unsigned)(*q - '0') < 10 && q - first < 20)
        m = m * 10 + (uint64_t)(*q++ - '0');
    long whole = q - first, frac = 0;
    int plain = whole > 0 && whole < 20 && (whole == 1 || *first != '0');
    if (plain && q < end && *q == '.') {
        const char *f = ++q;
        while (q < end && (unsigned)(*q - '0') < 10 && q - f < 20)
            m = m * 10 + (uint64_t)(*q++ - '0');
        frac = q - f;
        plain = frac > 0;
    }
    if (plain && whole + frac <= 19 && frac <= 22 && m <= (1ull << 53) && q < end
        && (unsigned)(*q - '0') >= 10 && *q != 'e' && *q != 'E') {
        double v = (double)m / POW10[frac];
        row->floats[col] = neg && (frac || m) ? -v : v;  /* "-0" is the integer 0 */
        row->float_valid |= 1u << col;
        s->p = q;
        return 0;
    }
    const char *start;
    size_t len;
    int integer, r;
    if ((r = scan_number(s, &start, &len, &integer)))
        return r;
    char text[64];
    if (len >= sizeof text)
        return FAIL;
    memcpy(text, start, len);
    text[len] = 0;
    row->floats[col] = strtod(text, NULL);
    if (isinf(row->floats[col]))
        return FAIL;  /* out of range: msgspec's message */
    row->float_valid |= 1u << col;
    return 0;
}

/* pid and tid: a number, or a string (Kineto's own pseudo-processes: "Spans"): decimal
 * digits are read as the integer, other text as null, as kineto_json._as_int does. */
static int read_id(Scanner *s, Row *row, int col) {
    if (s->p < s->end && *s->p == '"') {
        const char *raw;
        size_t len;
        int escaped, r;
        if ((r = read_string(s, NULL, &raw, &len, &escaped)))
            return r;
        if (escaped)
            return FAIL;
        size_t i = (len && raw[0] == '-') ? 1 : 0;
        if (i == len)
            return 0;  /* "" or "-": null */
        for (size_t j = i; j < len; j++)
            if (raw[j] < '0' || raw[j] > '9')
                return 0;  /* not a number: null */
        while (i + 1 < len && raw[i] == '0')  /* int("007") == 7 */
            i++;
        char digits[24];
        if (len - i > 19)
            return FAIL;
        size_t n = 0;
        if (raw[0] == '-')
            digits[n++] = '-';
        memcpy(digits + n, raw + i, len - i);
        n += len - i;
        if (parse_int64(digits, n, &row->ints[col]))
            return FAIL;
        row->int_valid |= 1u << col;
        return 0;
    }
    return read_int(s, row, col);
}

/* grid and block: [x, y, z], each an integer or null, fewer allowed. */
static int read_dim3(Scanner *s, Row *row, int first) {
    if (s->p >= s->end || *s->p != '[')
        return FAIL;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    for (int i = 0;; i++) {
        int r;
        if (i == 3)
            return FAIL;
        if ((r = read_int(s, row, first + i)))
            return r;
        skip_ws(s);
        if (s->p >= s->end)
            return FAIL;
        if (*s->p == ']') {
            s->p++;
            return 0;
        }
        if (*s->p != ',')
            return FAIL;
        s->p++;
        skip_ws(s);
    }
}

#define KEY_IS(lit) (len == sizeof(lit) - 1 && memcmp(key, lit, sizeof(lit) - 1) == 0)

/* Reads an object's "key": (at s->p) into key/len; FAIL for an escaped key. */
static int read_key(Scanner *s, const char **key, size_t *len) {
    int escaped, r;
    if (s->p >= s->end || *s->p != '"')
        return FAIL;
    if ((r = read_string(s, NULL, key, len, &escaped)))
        return r;
    if (escaped)
        return FAIL;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':')
        return FAIL;
    s->p++;
    skip_ws(s);
    return 0;
}

/* Object members, calling ``field`` for each; ``field`` returns 1 when it did not read the
 * value (it is then skipped). */
typedef int (*FieldFn)(Scanner *, Row *, const char *, size_t, uint32_t *);

static int read_object(Scanner *s, Row *row, FieldFn field) {
    if (s->p >= s->end || *s->p != '{')
        return FAIL;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    uint32_t seen = 0;
    for (;;) {
        const char *key;
        size_t len;
        int r;
        if ((r = read_key(s, &key, &len)))
            return r;
        r = field(s, row, key, len, &seen);
        if (r == 1)
            r = skip_value(s, 2);
        if (r)
            return r;
        skip_ws(s);
        if (s->p >= s->end)
            return FAIL;
        if (*s->p == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (*s->p == '}') {
            s->p++;
            return 0;
        }
        return FAIL;
    }
}

static int once(uint32_t *seen, int bit) {
    if (*seen & (1u << bit))
        return FAIL;  /* a key twice: which one counts is msgspec's call */
    *seen |= 1u << bit;
    return 0;
}

static int args_field(Scanner *s, Row *row, const char *key, size_t len, uint32_t *seen) {
    int col;
    if (KEY_IS("External id")) col = I_EXT;
    else if (KEY_IS("Python id")) col = I_PYID;
    else if (KEY_IS("Python parent id")) col = I_PYPARENT;
    else if (KEY_IS("correlation")) col = I_CORR;
    else if (KEY_IS("cbid")) col = I_CBID;
    else if (KEY_IS("device")) col = I_DEVICE;
    else if (KEY_IS("stream")) col = I_STREAM;
    else if (KEY_IS("bytes")) col = I_BYTES;
    else if (KEY_IS("graph id")) col = I_GRAPH;
    else if (KEY_IS("Sequence number")) col = I_SEQ;
    else if (KEY_IS("grid") || KEY_IS("block")) {
        col = key[0] == 'g' ? I_GRID_X : I_BLOCK_X;
        return once(seen, col) ? FAIL : read_dim3(s, row, col);
    } else if (KEY_IS("Input Dims") || KEY_IS("Input type")) {
        int i = key[6] == 'D' ? 0 : 1;
        if (once(seen, N_INT + i))
            return FAIL;
        const char *start = s->p;
        int r = skip_value(s, 2);
        if (r)
            return r;
        row->raw[i] = start;
        row->raw_len[i] = (size_t)(s->p - start);
        return 0;
    } else {
        return 1;
    }
    return once(seen, col) ? FAIL : read_int(s, row, col);
}

/* A decoded short string (ph, cat), compared; FAIL when it is not a string or null. */
static int read_cat(Scanner *s, Row *row) {
    if (s->p < s->end && *s->p == 'n')
        return literal(s, "null", 4);
    const char *raw;
    size_t len;
    int escaped, r;
    if (s->p >= s->end || *s->p != '"')
        return FAIL;
    if ((r = read_string(s, NULL, &raw, &len, &escaped)))
        return r;
    if (escaped)
        return FAIL;
    for (int i = 0; i < s->n_cats; i++)
        if (s->cat_lens[i] == len && memcmp(s->cats[i], raw, len) == 0)
            row->cat = i;
    return 0;
}

static int event_field(Scanner *s, Row *row, const char *key, size_t len, uint32_t *seen) {
    int r;
    if (KEY_IS("ph")) {
        const char *raw;
        size_t n;
        int escaped;
        if (once(seen, 0) || s->p >= s->end || *s->p != '"')
            return FAIL;
        if ((r = read_string(s, NULL, &raw, &n, &escaped)))
            return r;
        if (escaped)
            return FAIL;
        row->is_complete = n == 1 && raw[0] == 'X';
        return 0;
    }
    if (KEY_IS("cat"))
        return once(seen, 1) ? FAIL : read_cat(s, row);
    if (KEY_IS("name")) {
        if (once(seen, 2))
            return FAIL;
        if (s->p < s->end && *s->p == 'n')
            return literal(s, "null", 4);
        if (s->p >= s->end || *s->p != '"')
            return FAIL;
        row->has_name = 1;
        s->name.len = 0;
        return read_string(s, &s->name, NULL, NULL, NULL);
    }
    if (KEY_IS("pid"))
        return once(seen, 3) ? FAIL : read_id(s, row, I_PID);
    if (KEY_IS("tid"))
        return once(seen, 4) ? FAIL : read_id(s, row, I_TID);
    if (KEY_IS("ts"))
        return once(seen, 5) ? FAIL : read_float(s, row, F_TS);
    if (KEY_IS("dur"))
        return once(seen, 6) ? FAIL : read_float(s, row, F_DUR);
    if (KEY_IS("args"))
        return once(seen, 7) ? FAIL : read_object(s, row, args_field);
    return 1;
}

/* Room for one more row in every column (grown together, bitmaps zeroed). */
static int reserve_row(Scanner *s) {
    if (s->n < s->cap)
        return 0;
    size_t cap = s->cap ? 2 * s->cap : 4096, bytes = cap / 8;
    Buf *bitmaps[N_INT + N_FLOAT];
    if (buf_reserve(&s->cat_codes, cap - s->n))
        return NOMEM;
    for (int c = 0; c < N_INT; c++) {
        s->ints[c].len = 8 * s->n;  /* rows are written in place: the length follows n */
        if (buf_reserve(&s->ints[c], 8 * (cap - s->n)))
            return NOMEM;
        bitmaps[c] = &s->int_valid[c];
    }
    for (int c = 0; c < N_FLOAT; c++) {
        s->floats[c].len = 8 * s->n;
        if (buf_reserve(&s->floats[c], 8 * (cap - s->n)))
            return NOMEM;
        bitmaps[N_INT + c] = &s->float_valid[c];
    }
    for (int c = 0; c < N_STR; c++) {
        s->str_ids[c].len = 4 * s->n;
        if (buf_reserve(&s->str_ids[c], 4 * (cap - s->n)))
            return NOMEM;
    }
    for (int c = 0; c < N_INT + N_FLOAT; c++) {
        Buf *bits = bitmaps[c];
        if (buf_reserve(bits, bytes - bits->len))
            return NOMEM;
        memset(bits->data + bits->len, 0, bytes - bits->len);
        bits->len = bytes;  /* trimmed to the rows in columns() */
    }
    s->cap = cap;
    return 0;
}

/* Appends a kept event's fields to the columns. */
static int commit(Scanner *s, Row *row) {
    size_t i = s->n;
    if (reserve_row(s))
        return NOMEM;
    s->cat_codes.data[s->cat_codes.len++] = (char)row->cat;
    for (int c = 0; c < N_INT; c++) {
        int on = (row->int_valid >> c) & 1;
        int64_t v = on ? row->ints[c] : 0;
        memcpy(s->ints[c].data + 8 * i, &v, 8);
        s->int_valid[c].data[i >> 3] |= (char)(on << (i & 7));
    }
    for (int c = 0; c < N_FLOAT; c++) {
        int on = (row->float_valid >> c) & 1;
        double v = on ? row->floats[c] : 0.0;
        memcpy(s->floats[c].data + 8 * i, &v, 8);
        s->float_valid[c].data[i >> 3] |= (char)(on << (i & 7));
    }
    /* names decoded; shapes and dtypes as their source text */
    for (int c = 0; c < N_STR; c++) {
        int32_t id = -1;
        if (c == S_NAME ? row->has_name : row->raw[c - 1] != NULL) {
            id = c == S_NAME ? intern(&s->strs[c], s->name.data ? s->name.data : "", s->name.len)
                             : intern(&s->strs[c], row->raw[c - 1], row->raw_len[c - 1]);
            if (id < 0)
                return NOMEM;
        }
        memcpy(s->str_ids[c].data + 4 * i, &id, 4);
    }
    s->n++;
    return 0;
}

static int read_event(Scanner *s) {
    Row row;
    memset(&row, 0, sizeof row);
    row.cat = -1;
    int r = read_object(s, &row, event_field);
    if (r)
        return r;
    return row.cat >= 0 && row.is_complete ? commit(s, &row) : 0;
}

static int scan_events(Scanner *s) {
    skip_ws(s);
    if (s->p >= s->end)
        return 0;
    for (;;) {
        int r;
        if (s->p >= s->end || *s->p != '{')
            return FAIL;  /* an event that is not an object: msgspec's message */
        if ((r = read_event(s)))
            return r;
        skip_ws(s);
        if (s->p >= s->end)
            return 0;
        if (*s->p != ',')
            return FAIL;
        s->p++;
        skip_ws(s);
    }
}

static void scanner_free(Scanner *s) {
    free(s->cat_codes.data);
    for (int c = 0; c < N_INT; c++) {
        free(s->ints[c].data);
        free(s->int_valid[c].data);
    }
    for (int c = 0; c < N_FLOAT; c++) {
        free(s->floats[c].data);
        free(s->float_valid[c].data);
    }
    for (int c = 0; c < N_STR; c++) {
        free(s->str_ids[c].data);
        free(s->strs[c].data.data);
        free(s->strs[c].spans.data);
        free(s->strs[c].slots);
    }
    free(s->name.data);
}

static PyObject *as_bytes(Buf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

/* A text column's distinct values: str (names, valid UTF-8 already) or bytes (JSON text). */
static PyObject *distinct(Interner *t, int text) {
    PyObject *list = PyList_New((Py_ssize_t)t->count);
    const size_t *spans = (const size_t *)t->spans.data;
    for (size_t id = 0; list && id < t->count; id++) {
        const char *p = t->data.data + spans[2 * id];
        Py_ssize_t n = (Py_ssize_t)spans[2 * id + 1];
        PyObject *v = text ? PyUnicode_DecodeUTF8(p, n, "strict") : PyBytes_FromStringAndSize(p, n);
        if (v == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)id, v);
    }
    return list;
}

/* (values, validity bitmap) pairs for numbers; (ids, distinct values) pairs for text. */
static PyObject *columns(Scanner *s) {
    for (int c = 0; c < N_INT; c++) {
        s->ints[c].len = 8 * s->n;
        s->int_valid[c].len = (s->n + 7) / 8;
    }
    for (int c = 0; c < N_FLOAT; c++) {
        s->floats[c].len = 8 * s->n;
        s->float_valid[c].len = (s->n + 7) / 8;
    }
    for (int c = 0; c < N_STR; c++)
        s->str_ids[c].len = 4 * s->n;
    PyObject *ints = PyTuple_New(N_INT), *floats = PyTuple_New(N_FLOAT),
             *strs = PyTuple_New(N_STR), *out = NULL;
    if (!ints || !floats || !strs)
        goto done;
    for (int c = 0; c < N_INT; c++) {
        PyObject *pair = Py_BuildValue("(NN)", as_bytes(&s->ints[c]), as_bytes(&s->int_valid[c]));
        if (!pair)
            goto done;
        PyTuple_SET_ITEM(ints, c, pair);
    }
    for (int c = 0; c < N_FLOAT; c++) {
        PyObject *pair = Py_BuildValue("(NN)", as_bytes(&s->floats[c]),
                                       as_bytes(&s->float_valid[c]));
        if (!pair)
            goto done;
        PyTuple_SET_ITEM(floats, c, pair);
    }
    for (int c = 0; c < N_STR; c++) {
        PyObject *pair = Py_BuildValue("(NN)", as_bytes(&s->str_ids[c]),
                                       distinct(&s->strs[c], c == S_NAME));
        if (!pair)
            goto done;
        PyTuple_SET_ITEM(strs, c, pair);
    }
    out = Py_BuildValue("(nNOOO)", (Py_ssize_t)s->n, as_bytes(&s->cat_codes), ints, floats, strs);
done:
    Py_XDECREF(ints);
    Py_XDECREF(floats);
    Py_XDECREF(strs);
    return out;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    PyObject *cats;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnO!", &view, &start, &end, &PyTuple_Type, &cats))
        return NULL;
    Scanner s;
    memset(&s, 0, sizeof s);
    const char *names[MAX_CATS];
    size_t lens[MAX_CATS];
    Py_ssize_t n_cats = PyTuple_GET_SIZE(cats);
    PyObject *result = NULL;
    if (n_cats > MAX_CATS || start < 0 || start > end || end > view.len) {
        PyErr_SetString(PyExc_ValueError, "scan: bad offsets or too many categories");
        goto out;
    }
    for (Py_ssize_t i = 0; i < n_cats; i++) {
        PyObject *c = PyTuple_GET_ITEM(cats, i);
        if (!PyBytes_Check(c)) {
            PyErr_SetString(PyExc_TypeError, "scan: categories must be bytes");
            goto out;
        }
        names[i] = PyBytes_AS_STRING(c);
        lens[i] = (size_t)PyBytes_GET_SIZE(c);
    }
    s.p = (const char *)view.buf + start;
    s.end = (const char *)view.buf + end;
    s.cats = names;
    s.cat_lens = lens;
    s.n_cats = (int)n_cats;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = scan_events(&s);
    Py_END_ALLOW_THREADS
    if (r == NOMEM)
        PyErr_NoMemory();
    else if (r == FAIL)
        result = Py_NewRef(Py_None);
    else
        result = columns(&s);
out:
    scanner_free(&s);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buf, start, end, cats) -> (n, cat_codes, ints, floats, texts) | None\n\n"
     "The complete events of categories ``cats`` in buf[start:end] (comma-separated JSON objects)"
     " as columns; None when the text is not plain JSON of that shape."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kineto_scan",
                                    "Columnar decoder for Kineto trace events.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kineto_scan(void) { return PyModule_Create(&module); }
