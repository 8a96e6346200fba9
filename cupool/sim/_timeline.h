/* What the compiled replay (_timeline.c) is built from: the records it keeps (copies,
 * waiters, heap entries), growable arrays, hash tables standing in for Python's dicts,
 * heapq's heap, the columns of a ReplayInput read through the buffer protocol, and the
 * D2H copies still reading bytes, sorted by offset. Included by _timeline.c only.
 */
#ifndef CUPOOL_SIM_TIMELINE_H
#define CUPOOL_SIM_TIMELINE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { URGENT = 0, NORMAL = 1 };
enum { HAND_OVER, WAITED, TAKEN, ENDED, COMPLETED, COMPUTE };  /* heap entry kinds */
enum { IDLE, DISPATCH, WAITED_DONE, NEXT_STEP, RECOMPUTED, RAN };  /* compute stages */
enum { D2H = 0, H2D = 1 };

typedef struct {
    double time;
    int priority, kind;
    long long seq;
    Py_ssize_t subject; /* a copy, a waiter, or the compute stage */
} Entry;

typedef struct {
    long long buffer_id, nbytes;
    double copy_us, enqueued, started, done;
    int direction, is_done;
    Py_ssize_t waits, nwaits;          /* H2D: copies to complete first, in `wait_pool` */
    Py_ssize_t first_link, last_link;  /* waiters to tell at completion (-1: none) */
    Py_ssize_t residency;              /* D2H: the residency it leaves */
} Copy;

typedef struct {
    Py_ssize_t left; /* copies still to complete */
    Py_ssize_t copy; /* the copy to hand over then; -1: the compute stream resumes */
} Waiter;

typedef struct {
    Py_ssize_t waiter, next;
} Link;

/* a growable array of fixed-size items */
typedef struct {
    char *items;
    Py_ssize_t n, cap, size;
} Vec;

static void *vec_push(Vec *v) {
    if (v->n == v->cap) {
        Py_ssize_t cap = v->cap ? 2 * v->cap : 64;
        char *grown = PyMem_Realloc(v->items, (size_t)cap * (size_t)v->size);
        if (!grown) { PyErr_NoMemory(); return NULL; }
        v->items = grown;
        v->cap = cap;
    }
    return v->items + (v->n++) * v->size;
}
#define VEC(type) {NULL, 0, 0, sizeof(type)}
#define AT(v, type, k) (((type *)(v).items)[k])

/* a hash table from a pair of integers to an index, inserted into (overwriting), never
 * deleted from: Python's dict keyed by (buffer, op) or by buffer */
typedef struct {
    long long *a, *b;
    Py_ssize_t *value; /* -1: empty */
    size_t mask;
} Table;

static int table_init(Table *t, Py_ssize_t count) {
    size_t cap = 16;
    while (cap < 2 * (size_t)count + 2) cap *= 2;
    t->a = PyMem_Malloc(cap * sizeof(long long));
    t->b = PyMem_Malloc(cap * sizeof(long long));
    t->value = PyMem_Malloc(cap * sizeof(Py_ssize_t));
    t->mask = cap - 1;
    if (!t->a || !t->b || !t->value) { PyErr_NoMemory(); return -1; }
    for (size_t k = 0; k < cap; k++) t->value[k] = -1;
    return 0;
}

static void table_free(Table *t) {
    PyMem_Free(t->a);
    PyMem_Free(t->b);
    PyMem_Free(t->value);
}

static size_t table_slot(const Table *t, long long a, long long b) {
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ull ^ ((uint64_t)b + 0x632BE59BD9B4E019ull);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    size_t k = (size_t)h & t->mask;
    while (t->value[k] >= 0 && (t->a[k] != a || t->b[k] != b)) k = (k + 1) & t->mask;
    return k;
}

static void table_set(Table *t, long long a, long long b, Py_ssize_t value) {
    size_t k = table_slot(t, a, b);
    t->a[k] = a;
    t->b[k] = b;
    t->value[k] = value;
}

static Py_ssize_t table_get(const Table *t, long long a, long long b) {
    return t->value[table_slot(t, a, b)];
}

/* heapq's heap of entries, ordered as Python orders the tuples (time, priority, seq) */
static inline int entry_less(const Entry *x, const Entry *y) {
    if (x->time != y->time) return x->time < y->time;
    if (x->priority != y->priority) return x->priority < y->priority;
    return x->seq < y->seq;
}

static void sift_down(Entry *heap, Py_ssize_t start, Py_ssize_t pos) {
    Entry item = heap[pos];
    while (pos > start) {
        Py_ssize_t parent = (pos - 1) >> 1;
        if (entry_less(&item, &heap[parent])) {
            heap[pos] = heap[parent];
            pos = parent;
            continue;
        }
        break;
    }
    heap[pos] = item;
}

static void sift_up(Entry *heap, Py_ssize_t end, Py_ssize_t pos) {
    Py_ssize_t start = pos;
    Entry item = heap[pos];
    Py_ssize_t child = 2 * pos + 1;
    while (child < end) {
        Py_ssize_t right = child + 1;
        if (right < end && !entry_less(&heap[child], &heap[right])) child = right;
        heap[pos] = heap[child];
        pos = child;
        child = 2 * pos + 1;
    }
    heap[pos] = item;
    sift_down(heap, start, pos);
}

typedef struct {
    Vec heap;
    long long seq;
} Heap;

static int heap_push(Heap *h, double time, int priority, int kind, Py_ssize_t subject) {
    Entry *e = vec_push(&h->heap);
    if (!e) return -1;
    e->time = time;
    e->priority = priority;
    e->kind = kind;
    e->seq = h->seq++;
    e->subject = subject;
    sift_down((Entry *)h->heap.items, 0, h->heap.n - 1);
    return 0;
}

static Entry heap_pop(Heap *h) {
    Entry *items = (Entry *)h->heap.items;
    Entry last = items[--h->heap.n];
    if (!h->heap.n) return last;
    Entry top = items[0];
    items[0] = last;
    sift_up(items, h->heap.n, 0);
    return top;
}

/* a column of a ReplayInput: an int64 or float64 NumPy array, read through the buffer
 * protocol */
typedef struct {
    Py_buffer view;
    Py_ssize_t n;
    int held;
} Column;

static int column_get(PyObject *owner, const char *name, char type, Column *c) {
    PyObject *array = PyObject_GetAttrString(owner, name);
    if (!array) return -1;
    int failed = PyObject_GetBuffer(array, &c->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT);
    Py_DECREF(array);
    if (failed) return -1;
    c->held = 1;
    const char *format = c->view.format ? c->view.format : "B";
    if (*format == '<' || *format == '=' || *format == '@') format++;
    int ok = c->view.ndim == 1 && c->view.itemsize == 8 && format[1] == '\0'
             && (type == 'd' ? format[0] == 'd' : (format[0] == 'l' || format[0] == 'q'));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "replay input %s must be a 1-d %s array", name,
                     type == 'd' ? "float64" : "int64");
        return -1;
    }
    c->n = c->view.shape[0];
    return 0;
}

#define LL(c) ((const long long *)(c).view.buf)
#define DBL(c) ((const double *)(c).view.buf)

enum {
    IN_FIRST, IN_IDS, IN_LOWS, IN_HIGHS, IN_NBYTES, IN_US, IN_TRIGGERS,
    DUE_FIRST, DUE_IDS, DUE_TRIGGERS,
    RC_FIRST, RC_IDS, RC_US,
    OUT_FIRST, OUT_IDS, OUT_RESIDENCIES, OUT_NBYTES, OUT_US, OUT_LOWS, OUT_HIGHS,
    FILLED_FIRST, FILLED_LOWS, FILLED_HIGHS,
    COLUMNS
};

static const struct {
    const char *group, *name;
    char type;
} COLUMN_NAMES[COLUMNS] = {
    {"swap_ins", "first", 'q'}, {"swap_ins", "buffer_ids", 'q'}, {"swap_ins", "lows", 'q'},
    {"swap_ins", "highs", 'q'}, {"swap_ins", "nbytes", 'q'}, {"swap_ins", "copy_us", 'd'},
    {"swap_ins", "triggers", 'q'},
    {"due", "first", 'q'}, {"due", "buffer_ids", 'q'}, {"due", "triggers", 'q'},
    {"recomputes", "first", 'q'}, {"recomputes", "buffer_ids", 'q'},
    {"recomputes", "duration_us", 'd'},
    {"swap_outs", "first", 'q'}, {"swap_outs", "buffer_ids", 'q'},
    {"swap_outs", "residencies", 'q'}, {"swap_outs", "nbytes", 'q'},
    {"swap_outs", "copy_us", 'd'}, {"swap_outs", "lows", 'q'}, {"swap_outs", "highs", 'q'},
    {"filled", "first", 'q'}, {"filled", "lows", 'q'}, {"filled", "highs", 'q'},
};

/* first[0] == 0, never decreasing, first[num_ops] == rows: a grouping the loop can index */
static int grouping_ok(const Column *first, Py_ssize_t num_ops, Py_ssize_t rows) {
    if (first->n != num_ops + 1) return 0;
    const long long *f = LL(*first);
    if (f[0] != 0 || f[num_ops] != rows) return 0;
    for (Py_ssize_t i = 0; i < num_ops; i++)
        if (f[i] > f[i + 1]) return 0;
    return 1;
}

static int any_nan(const Column *c) {
    const double *x = DBL(*c);
    for (Py_ssize_t k = 0; k < c->n; k++)
        if (isnan(x[k])) return 1;
    return 0;
}

#define BOUND (1LL << 61) /* offsets and sizes the loop's sums cannot overflow */

static int within_bound(const Column *c) {
    const long long *x = LL(*c);
    for (Py_ssize_t k = 0; k < c->n; k++)
        if (x[k] <= -BOUND || x[k] >= BOUND) return 0;
    return 1;
}

/* the D2H copies that may still read device bytes: their lows sorted, and (high, copy)
 * in the same order (Python's lows and pending) */
typedef struct {
    long long *lows, *highs;
    Py_ssize_t *copies;
    Py_ssize_t n, dead;
} Pending;

static Py_ssize_t bisect(const long long *a, Py_ssize_t lo, Py_ssize_t hi, long long x,
                         int right) {
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (right ? !(x < a[mid]) : a[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

#endif /* CUPOOL_SIM_TIMELINE_H */
