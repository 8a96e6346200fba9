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

#include "../_int64_arg.h"

typedef struct {
    int64_t offset, top;
} Range;

/* Ends every run of ranges below, so that merging needs no bounds checks (no range reaches
 * it: offset + size fits in an int64). */
static const Range SENTINEL = {INT64_MAX, INT64_MAX};

/* A union of byte ranges: disjoint, sorted by offset, none touching the next (a range
 * [a, b) and [b, c) are stored as [a, c)), followed by SENTINEL. */
typedef struct {
    Range *items;
    int32_t len, cap;
} RangeSet;

/* A segment tree node's two unions (see the top of this file). */
typedef struct {
    RangeSet cover, touch;
} Node;

/* Storage of the sets' ranges: chunks of 4 << c ranges (class c) cut from large blocks; a
 * chunk a set outgrows is reused for the next request of its class. Sets that are filled
 * one after another lie side by side, and the end frees a few blocks, not every set. */
#define POOL_BLOCK ((Py_ssize_t)1 << 16)

#define MAX_BUFFERS ((Py_ssize_t)1 << 30)

typedef struct {
    Range **blocks;
    Py_ssize_t num_blocks, max_blocks, left;
    Range *next, *unused[32];
} Pool;

static Range *pool_take(Pool *pool, int cls) {
    Py_ssize_t size = (Py_ssize_t)4 << cls;
    Range *chunk = pool->unused[cls];
    if (chunk) {
        memcpy(&pool->unused[cls], chunk, sizeof(Range *));
        return chunk;
    }
    if (size > pool->left) {
        if (pool->num_blocks == pool->max_blocks) {
            Py_ssize_t max_blocks = pool->max_blocks ? 2 * pool->max_blocks : 16;
            Range **blocks = realloc(pool->blocks, (size_t)max_blocks * sizeof(Range *));
            if (!blocks) return NULL;
            pool->blocks = blocks;
            pool->max_blocks = max_blocks;
        }
        Py_ssize_t block = size > POOL_BLOCK ? size : POOL_BLOCK;
        Range *items = malloc((size_t)block * sizeof(Range));
        if (!items) return NULL;
        pool->blocks[pool->num_blocks++] = items;
        pool->next = items;
        pool->left = block;
    }
    chunk = pool->next;
    pool->next += size;
    pool->left -= size;
    return chunk;
}

static void pool_give(Pool *pool, Range *chunk, int cls) {
    memcpy(chunk, &pool->unused[cls], sizeof(Range *));
    pool->unused[cls] = chunk;
}

static void pool_free(Pool *pool) {
    for (Py_ssize_t b = 0; b < pool->num_blocks; b++) free(pool->blocks[b]);
    free(pool->blocks);
}

/* Room for `len` ranges and the sentinel. */
static int set_reserve(Pool *pool, RangeSet *set, int32_t len) {
    if (len < set->cap) return 0;
    int cls = set->cap ? __builtin_ctz((unsigned)set->cap) - 1 : 0;
    while ((4 << cls) <= len) cls++;
    Range *items = pool_take(pool, cls);
    if (!items) return -1;
    if (set->cap) {
        memcpy(items, set->items, (size_t)(set->len + 1) * sizeof(Range));
        pool_give(pool, set->items, __builtin_ctz((unsigned)set->cap) - 2);
    } else {
        items[0] = SENTINEL;
    }
    set->items = items;
    set->cap = 4 << cls;
    return 0;
}

/* Adds [offset, top) to the union: the ranges it overlaps or touches are merged into one. */
static int set_add(Pool *pool, RangeSet *set, int64_t offset, int64_t top) {
    int32_t len = set->len;
    if (set_reserve(pool, set, len + 1)) return -1;
    Range *items = set->items;
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
    if (first < end) {  /* merge with ranges first..end-1 */
        if (items[first].offset < offset) offset = items[first].offset;
        if (items[end - 1].top > top) top = items[end - 1].top;
    }
    /* ranges end.. (and the sentinel) move to first + 1 */
    memmove(items + first + 1, items + end, (size_t)(len - end + 1) * sizeof(Range));
    items[first].offset = offset;
    items[first].top = top;
    set->len = len - (end - first) + 1;
    return 0;
}

/* `a` where mask is all ones, `b` where it is zero: a select the compiler cannot turn into
 * a branch. */
static inline int64_t pick(int64_t mask, int64_t a, int64_t b) { return (a & mask) | (b & ~mask); }

/* Writes the union of two offset-sorted, sentinel-ended runs (count >= 1 ranges in all) to
 * `out` (sorted, disjoint, none touching the next), followed by the sentinel; returns its
 * length. Free of branches in the loop: which run goes next and whether a range starts a new
 * one of the union are unpredictable. */
static Py_ssize_t merge_union(const Range *x, const Range *y, Py_ssize_t count, Range *out) {
    Range current = x->offset <= y->offset ? *x++ : *y++;
    Py_ssize_t len = 0;
    for (Py_ssize_t i = 1; i < count; i++) {
        int64_t take_x = x->offset <= y->offset;
        const Range *next = (const Range *)(intptr_t)pick(-take_x, (intptr_t)x, (intptr_t)y);
        x += take_x;
        y += 1 - take_x;
        int64_t offset = next->offset, top = next->top;
        int64_t fresh = offset > current.top;
        out[len] = current;
        len += fresh;
        current.offset = pick(-fresh, offset, current.offset);
        current.top = pick(-(fresh | (top > current.top)), top, current.top);
    }
    out[len++] = current;
    out[len] = SENTINEL;
    return len;
}

/* Growable scratch space for one query's merge. */
typedef struct {
    Range *items[2];
    Py_ssize_t cap;
} Scratch;

static int scratch_reserve(Scratch *scratch, Py_ssize_t len) {
    if (len <= scratch->cap) return 0;
    Py_ssize_t cap = scratch->cap ? 2 * scratch->cap : 256;
    while (cap < len) cap *= 2;
    for (int h = 0; h < 2; h++) {
        Range *items = realloc(scratch->items[h], (size_t)cap * sizeof(Range));
        if (!items) return -1;
        scratch->items[h] = items;
    }
    scratch->cap = cap;
    return 0;
}

/* The union of `count` (2 to 256) non-empty sets, merged pairwise round by round: its ranges
 * are left in *out, their number is returned (-1: out of memory). */
static Py_ssize_t union_of_sets(const RangeSet **sets, Py_ssize_t count, Scratch *scratch,
                                const Range **out) {
    Py_ssize_t total = 0, start[128], len[128];
    for (Py_ssize_t s = 0; s < count; s++) total += sets[s]->len;
    /* each run is followed by its sentinel */
    if (scratch_reserve(scratch, total + count)) return -1;
    Range *from = scratch->items[0], *to = scratch->items[1];
    Py_ssize_t runs = 0, used = 0;
    for (Py_ssize_t s = 0; s < count; s += 2) {  /* the first round reads the sets */
        const RangeSet *y = s + 1 < count ? sets[s + 1] : NULL;
        start[runs] = used;
        len[runs] = merge_union(sets[s]->items, y ? y->items : &SENTINEL,
                                sets[s]->len + (y ? y->len : 0), from + used);
        used += len[runs++] + 1;
    }
    while (runs > 1) {
        Py_ssize_t merged = 0;
        used = 0;
        for (Py_ssize_t r = 0; r < runs; r += 2) {
            const Range *y = r + 1 < runs ? from + start[r + 1] : &SENTINEL;
            Py_ssize_t count_y = r + 1 < runs ? len[r + 1] : 0;
            start[merged] = used;
            len[merged] = merge_union(from + start[r], y, len[r] + count_y, to + used);
            used += len[merged++] + 1;
        }
        runs = merged;
        Range *swap = from;
        from = to;
        to = swap;
    }
    *out = from;
    return len[0];
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

/* The canonical nodes of slots [lo, hi) in a tree with `leaves` leaves: the fewest nodes
 * whose slots make up exactly [lo, hi), at most 2 per level. Returns how many. */
static Py_ssize_t canonical_nodes(Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t leaves,
                                  Py_ssize_t *canon) {
    Py_ssize_t count = 0;
    for (lo += leaves, hi += leaves; lo < hi; lo >>= 1, hi >>= 1) {
        if (lo & 1) canon[count++] = lo++;
        if (hi & 1) canon[count++] = --hi;
    }
    return count;
}

/* Requests from memory the nodes a query for slots [lo, hi) reads: its canonical nodes and
 * the root paths of its two end slots. */
static void prefetch_nodes(const Node *tree, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t leaves) {
    for (Py_ssize_t left = lo + leaves, right = hi - 1 + leaves; left; left >>= 1, right >>= 1) {
        __builtin_prefetch(&tree[left]);
        __builtin_prefetch(&tree[right]);
    }
    for (lo += leaves, hi += leaves; lo < hi; lo >>= 1, hi >>= 1) {
        if (lo & 1) __builtin_prefetch(&tree[lo++]);
        if (hi & 1) __builtin_prefetch(&tree[--hi]);
    }
}

/* How many buffers ahead of the one being placed its lifetime and size are requested. */
#define PREFETCH_AHEAD 8

/* Marks in `asked` the nodes whose touch set some query reads (ASKED: a canonical node of a
 * buffer in `order`) and those with such a node at or above them (ASKED_ABOVE): a touch set
 * no query reads is not kept, and an insertion walking up stops where none is left. */
enum { ASKED = 1, ASKED_ABOVE = 2 };

static void mark_asked(const int64_t *first, const int64_t *last, const int64_t *order,
                       Py_ssize_t count, Py_ssize_t leaves, uint8_t *asked) {
    Py_ssize_t canon[128];
    for (Py_ssize_t q = 0; q < count; q++) {
        int64_t j = order[q];
        Py_ssize_t num_canon = canonical_nodes(first[j], last[j], leaves, canon);
        for (Py_ssize_t c = 0; c < num_canon; c++) asked[canon[c]] = ASKED;
    }
    for (Py_ssize_t v = 1; v < 2 * leaves; v++)
        if (asked[v] || asked[v >> 1] & ASKED_ABOVE) asked[v] |= ASKED_ABOVE;
}

static PyObject *place(PyObject *self, PyObject *args) {
    PyObject *o_first, *o_last, *o_sizes, *o_order, *o_offsets;
    Py_ssize_t num_slots;
    Arg a_first = {0}, a_last = {0}, a_sizes = {0}, a_order = {0}, a_offsets = {0};
    Node *tree = NULL;
    Scratch scratch = {{NULL, NULL}, 0};
    Pool pool = {0};
    int32_t *seen = NULL;
    uint8_t *asked = NULL;
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
    if (a_first.view.len / 8 != n || a_last.view.len / 8 != n || a_offsets.view.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "first, last, sizes and offsets must have one length");
        goto done;
    }
    if (n >= MAX_BUFFERS) {  /* a set's capacity, a power of two above its length, is an int32 */
        PyErr_Format(PyExc_ValueError, "%zd buffers (must be < 2^30)", n);
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
    tree = calloc((size_t)nodes, sizeof(Node));
    seen = calloc((size_t)nodes, sizeof(int32_t));
    asked = calloc((size_t)nodes, 1);
    if (!tree || !seen || !asked) goto no_memory;
    mark_asked(first, last, order, count, leaves, asked);

    for (Py_ssize_t q = 0; q < count; q++) {
        int64_t j = order[q], size = sizes[j];
        /* memory the next queries read is requested now, while this one is being placed */
        if (q + PREFETCH_AHEAD < count) {
            int64_t ahead = order[q + PREFETCH_AHEAD];
            __builtin_prefetch(&first[ahead]);
            __builtin_prefetch(&last[ahead]);
            __builtin_prefetch(&sizes[ahead]);
        }
        if (q + 1 < count) prefetch_nodes(tree, first[order[q + 1]], last[order[q + 1]], leaves);
        Py_ssize_t canon[128], num_canon = canonical_nodes(first[j], last[j], leaves, canon);
        /* the sets to merge: touch of the canonical nodes, cover of both end slots' paths */
        const RangeSet *sets[256];
        Py_ssize_t num_sets = 0;
#define GATHER(set) if ((set).len) sets[num_sets++] = &(set)
        for (Py_ssize_t c = 0; c < num_canon; c++) GATHER(tree[canon[c]].touch);
        Py_ssize_t left = first[j] + leaves, right = last[j] - 1 + leaves;
        for (; left != right; left >>= 1, right >>= 1) {
            GATHER(tree[left].cover);
            GATHER(tree[right].cover);
        }
        for (; left; left >>= 1) GATHER(tree[left].cover);
#undef GATHER
        for (Py_ssize_t s = 0; s < num_sets; s++) __builtin_prefetch(sets[s]->items);
        const Range *ranges = NULL;
        Py_ssize_t k = 0;
        if (num_sets == 1) {
            ranges = sets[0]->items;
            k = sets[0]->len;
        } else if (num_sets > 1 && (k = union_of_sets(sets, num_sets, &scratch, &ranges)) < 0) {
            goto no_memory;
        }
        int64_t offset = best_gap(ranges, k, size);
        offsets[j] = offset;
        for (Py_ssize_t c = 0; c < num_canon; c++) {
            if (set_add(&pool, &tree[canon[c]].cover, offset, offset + size)) goto no_memory;
            for (Py_ssize_t v = canon[c]; asked[v] & ASKED_ABOVE && seen[v] != q + 1; v >>= 1) {
                seen[v] = (int32_t)(q + 1);
                if (asked[v] & ASKED && set_add(&pool, &tree[v].touch, offset, offset + size))
                    goto no_memory;
            }
        }
    }
    result = Py_NewRef(Py_None);
    goto done;
no_memory:
    PyErr_NoMemory();

done:
    pool_free(&pool);
    free(tree);
    free(seen);
    free(asked);
    free(scratch.items[0]);
    free(scratch.items[1]);
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
