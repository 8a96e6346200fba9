/* The best-fit decoder of cupool.planning.solvers.greedy, compiled.
 *
 * place(first, last, sizes, order, num_slots, offsets) places buffers in `order`: buffer j
 * covers time slots [first[j], last[j]) and goes into the smallest gap (ties: lowest offset)
 * left by the already placed buffers whose slots overlap its own, else just above the highest
 * of them; offsets[j] receives its offset. It is the rule of greedy._place_python and gives
 * the same offsets.
 *
 * That choice depends only on the *union* of the overlapping buffers' byte ranges: with every
 * size >= 1, a gap of the scan in best_gap is either a hole of the union or <= 0 bytes (no
 * buffer fits). So instead of the buffers themselves the index keeps unions, which stay
 * small when many long-lived buffers are packed side by side: a few ranges where thousands
 * of buffers overlap a query.
 *
 * Placed buffers are indexed by a segment tree over slots: cover[v] is the union of the
 * buffers whose canonical nodes include v, touch[v] the union of those with a canonical node
 * in v's subtree. The buffers overlapping [lo, hi) are those in touch[c] for the query's
 * canonical nodes c and in cover[a] for the nodes a on the root paths of its two end slots
 * (buffers spanning every slot included); their union is the union of those sets. Each set
 * is a sorted array, so a query merges O(log T) sorted runs.
 *
 * All arrays are C-contiguous int64 (NumPy's default integer on 64-bit Linux/macOS); every
 * size must be >= 1 (greedy.Decoder sends other problems to the Python decoder).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t offset, top;
} Range;

/* A union of byte ranges: disjoint, sorted by offset, none touching the next (a range
 * [a, b) and [b, c) are stored as [a, c)). */
typedef struct {
    Range *items;
    int32_t len, cap;
} RangeSet;

static int set_reserve(RangeSet *set, int32_t len) {
    if (len <= set->cap) return 0;
    int32_t cap = set->cap ? 2 * set->cap : 4;
    while (cap < len) cap *= 2;
    Range *items = realloc(set->items, (size_t)cap * sizeof(Range));
    if (!items) return -1;
    set->items = items;
    set->cap = cap;
    return 0;
}

/* Adds [offset, top) to the union: the ranges it overlaps or touches are merged into one. */
static int set_add(RangeSet *set, int64_t offset, int64_t top) {
    Range *items = set->items;
    int32_t len = set->len;
    if (len == 0 || items[len - 1].top < offset) {  /* above everything: append */
        if (set_reserve(set, len + 1)) return -1;
        set->items[len].offset = offset;
        set->items[len].top = top;
        set->len = len + 1;
        return 0;
    }
    int32_t lo = 0, hi = len;  /* first = the first range with top >= offset */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (items[mid].top < offset) lo = mid + 1; else hi = mid;
    }
    int32_t first = lo;
    hi = len;  /* end = the first range from `first` on with offset > top */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (items[mid].offset <= top) lo = mid + 1; else hi = mid;
    }
    int32_t end = lo;
    if (first == end) {  /* overlaps and touches nothing: insert before `first` */
        if (set_reserve(set, len + 1)) return -1;
        items = set->items;
        memmove(items + first + 1, items + first, (size_t)(len - first) * sizeof(Range));
        items[first].offset = offset;
        items[first].top = top;
        set->len = len + 1;
        return 0;
    }
    if (items[first].offset < offset) offset = items[first].offset;
    if (items[end - 1].top > top) top = items[end - 1].top;
    items[first].offset = offset;
    items[first].top = top;
    memmove(items + first + 1, items + end, (size_t)(len - end) * sizeof(Range));
    set->len = len - (end - first - 1);
    return 0;
}

/* Sort by offset: quicksort with median-of-three pivots, insertion sort for short runs. */
static void sort_ranges(Range *a, Py_ssize_t n) {
    while (n > 16) {
        Py_ssize_t mid = n / 2, i = 0, j = n - 1;
        Range t;
        if (a[mid].offset < a[0].offset) { t = a[mid]; a[mid] = a[0]; a[0] = t; }
        if (a[n - 1].offset < a[0].offset) { t = a[n - 1]; a[n - 1] = a[0]; a[0] = t; }
        if (a[n - 1].offset < a[mid].offset) { t = a[n - 1]; a[n - 1] = a[mid]; a[mid] = t; }
        int64_t pivot = a[mid].offset;
        for (;;) {
            while (a[i].offset < pivot) i++;
            while (a[j].offset > pivot) j--;
            if (i >= j) break;
            t = a[i]; a[i] = a[j]; a[j] = t;
            i++;
            j--;
        }
        /* recurse on the smaller part, loop on the larger */
        if (j + 1 < n - j - 1) {
            sort_ranges(a, j + 1);
            a += j + 1;
            n -= j + 1;
        } else {
            sort_ranges(a + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        Range x = a[i];
        Py_ssize_t j = i;
        while (j > 0 && a[j - 1].offset > x.offset) { a[j] = a[j - 1]; j--; }
        a[j] = x;
    }
}

/* The best-fit offset for `size` bytes among offset-sorted byte ranges. */
static int64_t best_gap(const Range *ranges, Py_ssize_t count, int64_t size) {
    int64_t reached = 0, best = -1, best_at = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const Range *r = &ranges[i];
        int64_t gap = r->offset - reached;
        if (gap >= size && (best < 0 || gap < best)) {
            best = gap;
            best_at = reached;
        }
        if (r->top > reached) reached = r->top;
    }
    return best >= 0 ? best_at : reached;
}

typedef struct {
    Py_buffer view;
    int held;
} Arg;

static int get_int64(PyObject *obj, Arg *arg, int writable, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &arg->view, flags) < 0) return -1;
    arg->held = 1;
    const char *f = arg->view.format;
    if (arg->view.itemsize != 8 || !f || (strcmp(f, "q") && strcmp(f, "l") &&
                                          strcmp(f, "<q") && strcmp(f, "<l") &&
                                          strcmp(f, "=q") && strcmp(f, "=l"))) {
        PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous int64 array", name);
        return -1;
    }
    return 0;
}

static PyObject *place(PyObject *self, PyObject *args) {
    PyObject *o_first, *o_last, *o_sizes, *o_order, *o_offsets;
    Py_ssize_t num_slots;
    Arg a_first = {0}, a_last = {0}, a_sizes = {0}, a_order = {0}, a_offsets = {0};
    RangeSet *cover = NULL, *touch = NULL, gathered = {0};
    int32_t *seen = NULL;
    PyObject *result = NULL;
    Py_ssize_t leaves = 1, nodes = 0;
    (void)self;

    if (!PyArg_ParseTuple(args, "OOOOnO", &o_first, &o_last, &o_sizes, &o_order, &num_slots,
                          &o_offsets))
        return NULL;
    if (get_int64(o_first, &a_first, 0, "first") || get_int64(o_last, &a_last, 0, "last") ||
        get_int64(o_sizes, &a_sizes, 0, "sizes") || get_int64(o_order, &a_order, 0, "order") ||
        get_int64(o_offsets, &a_offsets, 1, "offsets"))
        goto done;
    Py_ssize_t n = a_sizes.view.len / 8, count = a_order.view.len / 8;
    if (a_first.view.len / 8 != n || a_last.view.len / 8 != n || a_offsets.view.len / 8 != n ||
        n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "first, last, sizes and offsets must have one length");
        goto done;
    }
    const int64_t *first = a_first.view.buf, *last = a_last.view.buf, *sizes = a_sizes.view.buf;
    const int64_t *order = a_order.view.buf;
    int64_t *offsets = a_offsets.view.buf;
    for (Py_ssize_t q = 0; q < count; q++) {
        int64_t j = order[q];
        if (j < 0 || j >= n || first[j] < 0 || last[j] > num_slots || first[j] >= last[j]) {
            PyErr_Format(PyExc_ValueError, "order[%zd] (=%lld) is not a buffer with slots in "
                         "[0, %zd)", q, (long long)j, num_slots);
            goto done;
        }
        if (sizes[j] < 1) {
            PyErr_Format(PyExc_ValueError, "order[%zd]: buffer %lld has size %lld (must be "
                         ">= 1)", q, (long long)j, (long long)sizes[j]);
            goto done;
        }
    }
    while (leaves < num_slots) leaves *= 2;
    nodes = 2 * leaves;
    cover = calloc((size_t)nodes, sizeof(RangeSet));
    touch = calloc((size_t)nodes, sizeof(RangeSet));
    seen = calloc((size_t)nodes, sizeof(int32_t));
    if (!cover || !touch || !seen) {
        PyErr_NoMemory();
        goto done;
    }

    for (Py_ssize_t q = 0; q < count; q++) {
        int64_t j = order[q], size = sizes[j];
        Py_ssize_t lo = first[j] + leaves, hi = last[j] + leaves;
        /* the canonical nodes of [lo, hi) */
        Py_ssize_t canon[128], num_canon = 0;
        while (lo < hi) {
            if (lo & 1) canon[num_canon++] = lo++;
            if (hi & 1) canon[num_canon++] = --hi;
            lo >>= 1;
            hi >>= 1;
        }
        /* the sets to merge: touch of the canonical nodes, cover of both end slots' paths */
        const RangeSet *sets[256];
        Py_ssize_t num_sets = 0, total = 0;
        for (Py_ssize_t c = 0; c < num_canon; c++) sets[num_sets++] = &touch[canon[c]];
        Py_ssize_t left = first[j] + leaves, right = last[j] - 1 + leaves;
        for (; left != right; left >>= 1, right >>= 1) {
            sets[num_sets++] = &cover[left];
            sets[num_sets++] = &cover[right];
        }
        for (; left; left >>= 1) sets[num_sets++] = &cover[left];
        for (Py_ssize_t s = 0; s < num_sets; s++) total += sets[s]->len;
        if (total > INT32_MAX || set_reserve(&gathered, (int32_t)total)) {
            PyErr_NoMemory();
            goto done;
        }
        Range *ranges = gathered.items;
        Py_ssize_t k = 0;
        for (Py_ssize_t s = 0; s < num_sets; s++) {
            memcpy(ranges + k, sets[s]->items, (size_t)sets[s]->len * sizeof(Range));
            k += sets[s]->len;
        }
        sort_ranges(ranges, k);
        int64_t offset = best_gap(ranges, k, size);
        offsets[j] = offset;
        for (Py_ssize_t c = 0; c < num_canon; c++) {
            if (set_add(&cover[canon[c]], offset, offset + size)) { PyErr_NoMemory(); goto done; }
            for (Py_ssize_t v = canon[c]; v && seen[v] != q + 1; v >>= 1) {
                seen[v] = (int32_t)(q + 1);
                if (set_add(&touch[v], offset, offset + size)) { PyErr_NoMemory(); goto done; }
            }
        }
    }
    result = Py_NewRef(Py_None);

done:
    if (cover) for (Py_ssize_t v = 0; v < nodes; v++) free(cover[v].items);
    if (touch) for (Py_ssize_t v = 0; v < nodes; v++) free(touch[v].items);
    free(cover);
    free(touch);
    free(seen);
    free(gathered.items);
    Arg *held[] = {&a_first, &a_last, &a_sizes, &a_order, &a_offsets};
    for (size_t i = 0; i < 5; i++)
        if (held[i]->held) PyBuffer_Release(&held[i]->view);
    return result;
}

static PyMethodDef methods[] = {
    {"place", place, METH_VARARGS,
     "place(first, last, sizes, order, num_slots, offsets): best-fit decoding of `order` into "
     "`offsets` (int64 arrays; see cupool.planning.solvers.greedy)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_greedy",
    .m_doc = "Compiled best-fit decoder of cupool.planning.solvers.greedy (identical offsets).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__greedy(void) { return PyModule_Create(&module); }
